// The FnCall wire (backends/fncall/fncall_wire.hpp): the request frame the
// node writes for the fork server, the frame boundary in a byte stream, and
// the server's answer, ack, clean and ready frames, with malformed frames
// refused. The fork server's side (backends/fncall/fork_server/) is covered end to end by
// test/e2e/test_fncall.py.
#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/fncall/fncall_wire.hpp"

using namespace dsec;
namespace wire = backends::fncall;

namespace {

std::string u32le(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i)
    s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

/// A frame as the fork server writes one: length of the rest, then fields.
std::string frame_of(const std::vector<std::string>& fields) {
  std::string body;
  for (auto& f : fields)
    body += u32le(static_cast<uint32_t>(f.size())) + f;
  return u32le(static_cast<uint32_t>(body.size())) + body;
}

/// The fields of a frame, as the fork server reads them.
std::vector<std::string> fields_of(std::string_view frame) {
  REQUIRE(frame.size() >= 4);
  std::vector<std::string> out;
  auto body = frame.substr(4);
  while (!body.empty()) {
    REQUIRE(body.size() >= 4);
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
      n |= static_cast<uint32_t>(static_cast<unsigned char>(body[i])) << (8 * i);
    REQUIRE(body.size() - 4 >= n);
    out.emplace_back(body.substr(4, n));
    body.remove_prefix(4 + n);
  }
  return out;
}

} // namespace

TEST_CASE("fncall wire: request frames", "[fncall][wire]") {
  struct row {
    const char* name;
    fncall_request req;
    std::vector<std::string> fields;
  };
  fncall_request plain;
  plain.language = "python";
  plain.code = "print(1)";
  fncall_request full;
  full.language = "bash";
  full.code = std::string("echo \0x", 7);
  full.stdin_data = "in\xff";
  full.timeout_s = 2.5;
  full.files = {{"/tmp/call/b", ""}, {"a.txt", std::string("\0\1", 2)}};
  std::vector<row> rows = {
    {"code only", plain, {"python", "print(1)", "", "10.000000", "0"}},
    {"files, binary code and stdin", full,
     {"bash", std::string("echo \0x", 7), "in\xff", "2.500000", "2", "/tmp/call/b", "", "a.txt",
      std::string("\0\1", 2)}},
  };
  for (auto& r : rows) {
    INFO(r.name);
    auto frame = wire::encode_request(r.req);
    CHECK(wire::frame_size(frame) == frame.size());
    CHECK(fields_of(frame) == r.fields);
  }
}

TEST_CASE("fncall wire: frame boundaries in a stream", "[fncall][wire]") {
  auto one = frame_of({"ack"});
  auto two = frame_of({"clean", "0"});
  auto stream = one + two;
  // Incomplete until the whole first frame is in; then its size alone.
  for (size_t n = 0; n < one.size(); ++n) {
    INFO("cut at " << n);
    CHECK(wire::frame_size(std::string_view(stream).substr(0, n)) == 0);
  }
  CHECK(wire::frame_size(std::string_view(stream).substr(0, one.size())) == one.size());
  CHECK(wire::frame_size(stream) == one.size());
  CHECK(wire::frame_size(std::string_view(stream).substr(one.size())) == two.size());
  CHECK(wire::frame_size(u32le(0)) == 4);
}

TEST_CASE("fncall wire: answers", "[fncall][wire]") {
  struct row {
    const char* name;
    std::vector<std::string> fields;
    int32_t exit_code;
    bool timed_out, truncated, tainted;
    double duration_ms;
    const char* out;
    const char* err;
    const char* error;
  };
  std::vector<row> rows = {
    {"ran", {"0", "0", "0", "12.5", "0", "hello\n", "", ""}, 0, false, false, false, 12.5,
     "hello\n", "", ""},
    {"failed and tainted", {"1", "0", "1", "3", "1", "", "Traceback", ""}, 1, false, true, true,
     3.0, "", "Traceback", ""},
    {"timed out", {"-9", "1", "0", "2000.25", "0", "", "", ""}, -9, true, false, false, 2000.25,
     "", "", ""},
    {"could not run", {"0", "0", "0", "0", "0", "", "", "unknown language"}, 0, false, false,
     false, 0.0, "", "", "unknown language"},
  };
  for (auto& r : rows) {
    INFO(r.name);
    auto a = wire::decode_answer(frame_of(r.fields));
    REQUIRE(a);
    CHECK(a->result.exit_code == r.exit_code);
    CHECK(a->result.timed_out == r.timed_out);
    CHECK(a->result.truncated == r.truncated);
    CHECK(a->tainted == r.tainted);
    CHECK(a->result.duration_ms == r.duration_ms);
    CHECK(a->result.stdout_data == r.out);
    CHECK(a->result.stderr_data == r.err);
    CHECK(a->error == r.error);
  }

  // Malformed: too few or too many fields, a field longer than the frame,
  // a frame shorter than its length prefix.
  auto good = frame_of({"0", "0", "0", "1", "0", "", "", ""});
  std::vector<std::string> bad = {
    "",
    "\x01\x00",
    frame_of({"0", "0", "0", "1", "0", "", ""}),
    frame_of({"0", "0", "0", "1", "0", "", "", "", "extra"}),
    u32le(8) + u32le(100) + "abcd",
    good.substr(0, good.size() - 1),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("bad answer #" << i);
    auto a = wire::decode_answer(bad[i]);
    REQUIRE_FALSE(a);
    CHECK(a.err().code == errc::internal);
    CHECK(a.err().message == "fncall: malformed answer from the fork server");
  }
}

TEST_CASE("fncall wire: ack, clean and ready frames", "[fncall][wire]") {
  struct row {
    const char* name;
    std::string frame;
    bool ack, ready;
    std::optional<bool> clean_tainted;
  };
  std::vector<row> rows = {
    {"ack", frame_of({"ack"}), true, false, std::nullopt},
    {"ready", frame_of({"ready"}), false, true, std::nullopt},
    {"clean", frame_of({"clean", "0"}), false, false, false},
    {"clean, reset failed", frame_of({"clean", "1"}), false, false, true},
    {"ack with a field too many", frame_of({"ack", "x"}), false, false, std::nullopt},
    {"clean without its flag", frame_of({"clean"}), false, false, std::nullopt},
    {"another word", frame_of({"nack"}), false, false, std::nullopt},
    {"an answer", frame_of({"0", "0", "0", "1", "0", "", "", ""}), false, false, std::nullopt},
    {"no length prefix", "ac", false, false, std::nullopt},
    {"field past the end", u32le(7) + u32le(9) + "ack", false, false, std::nullopt},
  };
  for (auto& r : rows) {
    INFO(r.name);
    CHECK(wire::is_ack_frame(r.frame) == r.ack);
    CHECK(wire::is_ready_frame(r.frame) == r.ready);
    CHECK(wire::clean_frame_tainted(r.frame) == r.clean_tainted);
  }
}
