// Terminals (issue 26 part 1): the init channel's pty frames round trip and
// refuse bad sizes and truncations; the REST routes of terminals; E2B's pty
// messages.
#include <catch2/catch.hpp>

#include "api/e2b_codec.hpp"
#include "api/gateway_routes.hpp"
#include "backends/channel/pty_proto.hpp"

using namespace dsec;
namespace proto = dsec::init_proto;

namespace {

std::string body_of(const std::string& frame) { return frame.substr(proto::header_size); }

} // namespace

TEST_CASE("pty frames: open and resize round trip", "[init][protocol][pty]") {
  proto::exec_msg m;
  m.env = {"A=b", "TERM=xterm"};
  m.cwd = "/work";
  m.user = "app";
  auto frame = proto::encode_pty_open(7, {132, 43}, m);
  proto::header h;
  REQUIRE(proto::peek_frame(frame, h) == proto::parse::complete);
  CHECK(h.type == proto::msg::pty_open);
  CHECK(h.id == 7);
  proto::pty_size size;
  proto::exec_msg got;
  REQUIRE(proto::decode_pty_open(body_of(frame), size, got));
  CHECK(size.cols == 132);
  CHECK(size.rows == 43);
  CHECK(got.argv.empty()); // the login shell
  CHECK(got.env == m.env);
  CHECK(got.cwd == "/work");
  CHECK(got.user == "app");
  CHECK(got.keep_stdin == 1);
  // Every truncation is refused.
  auto body = body_of(frame);
  for (size_t n = 0; n < body.size(); ++n)
    CHECK_FALSE(proto::decode_pty_open(body.substr(0, n), size, got));

  auto rs = proto::encode_pty_resize(3, {1, 1000});
  REQUIRE(proto::decode_pty_resize(body_of(rs), size));
  CHECK(size.cols == 1);
  CHECK(size.rows == 1000);
  CHECK_FALSE(proto::decode_pty_resize(body_of(rs).substr(1), size));
}

TEST_CASE("pty frames: sizes out of 1..1000 are refused", "[init][protocol][pty]") {
  struct row {
    int64_t cols, rows;
    bool ok;
  };
  row rows[] = {{80, 24, true}, {1, 1, true},   {1000, 1000, true}, {0, 24, false},
                {80, 0, false}, {1001, 5, false}, {5, 1001, false}, {-1, 5, false}};
  for (auto& r : rows) {
    INFO(r.cols << "x" << r.rows);
    CHECK((proto::pty_size_error(r.cols, r.rows) == nullptr) == r.ok);
  }
  proto::pty_size size;
  auto bad = proto::encode_pty_resize(1, {0, 24});
  CHECK_FALSE(proto::decode_pty_resize(body_of(bad), size));
}

TEST_CASE("terminal routes", "[routes][pty]") {
  struct row {
    const char* method;
    const char* target;
    route::kind_t kind;
    int32_t pid;
  };
  row rows[] = {
    {"POST", "/v1/sandboxes/n-1.abc/pty", route::pty_open, 0},
    {"GET", "/v1/sandboxes/n-1.abc/pty?cols=80&rows=24", route::pty_open, 0},
    {"GET", "/v1/sandboxes/n-1.abc/pty/42", route::pty_get, 42},
    {"POST", "/v1/sandboxes/n-1.abc/pty/42/input", route::pty_input, 42},
    {"POST", "/v1/sandboxes/n-1.abc/pty/42/resize", route::pty_resize, 42},
    {"POST", "/v1/sandboxes/n-1.abc/pty/42/kill", route::pty_kill, 42},
  };
  for (auto& r : rows) {
    INFO(r.method << " " << r.target);
    bool na = false;
    auto got = parse_route(r.method, r.target, na);
    REQUIRE(got.ok());
    CHECK(got->kind == r.kind);
    CHECK(got->pid == r.pid);
    CHECK(got->id == "n-1.abc");
  }
  bool na = false;
  auto bad = parse_route("DELETE", "/v1/sandboxes/n-1.abc/pty/42", na);
  REQUIRE_FALSE(bad.ok());
  CHECK(na);
  auto pid = parse_route("GET", "/v1/sandboxes/n-1.abc/pty/x", na);
  REQUIRE_FALSE(pid.ok());
  CHECK(pid.err().code == errc::invalid_argument);
}

TEST_CASE("e2b pty messages", "[e2b][pty]") {
  auto size = e2b::parse_start_pty(
    R"({"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":100,"rows":30}}})");
  REQUIRE(size.ok());
  CHECK(size->first == 100);
  CHECK(size->second == 30);
  auto zero = e2b::parse_start_pty(R"({"process":{"cmd":"x"},"pty":{"size":{"cols":5}}})");
  REQUIRE(zero.ok());
  CHECK(zero->second == -1); // omitted: refused by the owner's range check
  CHECK_FALSE(e2b::parse_start_pty(R"({"process":{"cmd":"x"},"pty":{}})").ok());

  auto up = e2b::parse_update(R"({"process":{"pid":9},"pty":{"size":{"cols":7,"rows":8}}})");
  REQUIRE(up.ok());
  CHECK(*up == std::make_tuple(9, 7, 8));
  auto nopty = e2b::parse_update(R"({"process":{"pid":9}})");
  REQUIRE_FALSE(nopty.ok());
  CHECK(nopty.err().code == errc::invalid_argument);

  auto in = e2b::parse_pty_input(R"({"process":{"pid":9},"input":{"pty":"aGk="}})");
  REQUIRE(in.ok());
  REQUIRE(in->has_value());
  CHECK((*in)->first == 9);
  CHECK((*in)->second == "hi");
  auto stdin_in = e2b::parse_pty_input(R"({"process":{"pid":9},"input":{"stdin":"aGk="}})");
  REQUIRE(stdin_in.ok());
  CHECK_FALSE(stdin_in->has_value());
  CHECK_FALSE(e2b::parse_pty_input(R"({"process":{"pid":9},"input":{"pty":"**"}})").ok());
  CHECK(e2b::pty_data_event("hi") == R"({"event":{"data":{"pty":"aGk="}}})");
}
