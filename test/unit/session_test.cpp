// Shell session text and the exact cut of a run's output (core/session.hpp).
#include <catch2/catch.hpp>

#include "core/session.hpp"

using namespace dsec;
using namespace dsec::session_text;

TEST_CASE("quote makes one POSIX word of any bytes but NUL", "[session]") {
  CHECK(quote("") == "''");
  CHECK(quote("a b") == "'a b'");
  CHECK(quote("it's") == "'it'\\''s'");
  CHECK(quote("\n$x`y`\"") == "'\n$x`y`\"'");
}

TEST_CASE("the script never holds the nonce in one piece", "[session]") {
  auto nonce = new_nonce();
  REQUIRE(nonce.size() == 32);
  CHECK(nonce != new_nonce());
  CHECK(run_script("echo hi", nonce).find(nonce) == std::string::npos);
  CHECK(open_script(nonce).find(nonce) == std::string::npos);
  CHECK(run_script("echo 'x'", nonce).find("eval 'echo '\\''x'\\'''") != std::string::npos);
}

TEST_CASE("check_cmd refuses NUL and over-long commands", "[session]") {
  CHECK(check_cmd("echo ok").empty());
  CHECK(!check_cmd(std::string("a\0b", 3)).empty());
  CHECK(!check_cmd(std::string(max_cmd + 1, 'x')).empty());
}

TEST_CASE("marker_cut cuts exactly at the marker, in any chunking", "[session]") {
  std::string nonce = "0123456789abcdef0123456789abcdef";
  struct row {
    std::string stream;
    std::string output;
    int status;
  };
  std::vector<row> rows = {
    {"abc" + nonce + ":0\n", "abc", 0},
    {"line\n" + nonce + ":17\n", "line\n", 17},
    {nonce + ":255\n", "", 255},
    // A look-alike with another nonce, and one with ours but no status.
    {"ffff" + nonce.substr(4) + ":0\n" + nonce + ":3\n", "ffff" + nonce.substr(4) + ":0\n", 3},
    {nonce + ":x\n" + nonce + ":1\n", nonce + ":x\n", 1},
  };
  for (auto& r : rows)
    for (size_t step : {size_t{1}, size_t{3}, size_t{7}, r.stream.size()}) {
      marker_cut cut(nonce, true);
      for (size_t i = 0; i < r.stream.size(); i += step)
        cut.feed(std::string_view(r.stream).substr(i, step));
      INFO(r.stream << " in chunks of " << step);
      REQUIRE(cut.done());
      CHECK(cut.take_output() == r.output);
      CHECK(cut.status() == r.status);
    }
}

TEST_CASE("marker_cut keeps what follows for the next run, and caps output", "[session]") {
  std::string nonce = "aaaabbbbccccddddaaaabbbbccccdddd";
  marker_cut err(nonce, false);
  CHECK(err.feed("warn" + nonce + "\nlate"));
  CHECK(err.take_output() == "warn");
  CHECK(err.take_rest() == "late");

  marker_cut big(nonce, true, 100);
  for (int i = 0; i < 50; ++i)
    big.feed(std::string(64, 'z'));
  CHECK(!big.done());
  big.feed(nonce + ":0\n");
  REQUIRE(big.done());
  CHECK(big.truncated());
  CHECK(big.take_output() == std::string(100, 'z'));
}
