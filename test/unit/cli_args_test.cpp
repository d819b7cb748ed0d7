// CLI argument parsing: both flag spellings, repeats, unknown flags, and the
// exec form where everything after the command word is passed through.
#include <catch2/catch.hpp>

#include "cmd/args.hpp"

using namespace dsec;
using namespace dsec::cli;

TEST_CASE("flags in both spellings, repeated values, positionals", "[cli]") {
  auto a = parse_args({"--layer", "a@1", "--layer=b@2", "--json", "pos"}, {"layer"}, {"json"});
  REQUIRE(a.ok());
  CHECK(a->all("layer") == std::vector<std::string>{"a@1", "b@2"});
  CHECK(a->has("json"));
  CHECK(a->positional == std::vector<std::string>{"pos"});
}

TEST_CASE("usage errors name the flag", "[cli]") {
  auto a = parse_args({"--bogus", "1"}, {"layer"}, {});
  REQUIRE_FALSE(a.ok());
  CHECK(a.err().message.find("--bogus") != std::string::npos);
  CHECK_FALSE(parse_args({"--layer"}, {"layer"}, {}).ok());
  CHECK_FALSE(parse_args({"--json=1"}, {}, {"json"}).ok());
  CHECK_FALSE(to_int("memory-mb", "12x").ok());
  CHECK(*to_int("memory-mb", "64") == 64);
  CHECK(*to_double("cpu", "0.5") == 0.5);
}

TEST_CASE("exec passes the command through verbatim", "[cli]") {
  auto a = parse_args({"id1", "--cwd", "/tmp", "ls", "-l", "--all"}, {"cwd"}, {}, true);
  REQUIRE(a.ok());
  CHECK(a->get("cwd") == "/tmp");
  CHECK(a->positional == std::vector<std::string>{"id1", "ls", "-l", "--all"});
  auto b = parse_args({"id1", "--", "--weird"}, {"cwd"}, {}, true);
  REQUIRE(b.ok());
  CHECK(b->positional == std::vector<std::string>{"id1", "--weird"});
}
