// The process routes' pieces that need no node: route parsing, the JSON of
// background commands and the process table, signal parsing, and the init
// protocol's ps / signal / started frames.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/gateway_routes.hpp"
#include "backends/channel/protocol.hpp"
#include "core/json_codec.hpp"

using namespace dsec;
namespace codec = json_codec;
namespace proto = init_proto;
using nlohmann::json;

TEST_CASE("process routes", "[routes][procs]") {
  bool na = false;
  auto r = parse_route("GET", "/v1/sandboxes/n.x/processes", na);
  REQUIRE(r);
  CHECK(r->kind == route::list_processes);
  CHECK(r->id == "n.x");
  r = parse_route("GET", "/v1/sandboxes/n.x/processes/42?wait=1", na);
  REQUIRE(r);
  CHECK(r->kind == route::get_process);
  CHECK(r->pid == 42);
  CHECK(r->query.at("wait") == "1");
  r = parse_route("DELETE", "/v1/sandboxes/n.x/processes/7", na);
  REQUIRE(r);
  CHECK(r->kind == route::kill_process);
  r = parse_route("POST", "/v1/sandboxes/n.x/processes/7/kill", na);
  REQUIRE(r);
  CHECK(r->kind == route::kill_process);
  CHECK(r->pid == 7);
  for (auto bad : {"/v1/sandboxes/n.x/processes/abc", "/v1/sandboxes/n.x/processes/-1",
                   "/v1/sandboxes/n.x/processes/1234567890"}) {
    auto e = parse_route("GET", bad, na);
    REQUIRE_FALSE(e);
    CHECK(e.err().code == errc::invalid_argument);
    CHECK_FALSE(na);
  }
  CHECK_FALSE(parse_route("PUT", "/v1/sandboxes/n.x/processes", na));
  CHECK(na);
  CHECK_FALSE(parse_route("GET", "/v1/sandboxes/n.x/processes/7/kill", na));
  CHECK(na);
  auto nf = parse_route("POST", "/v1/sandboxes/n.x/processes/7/other", na);
  REQUIRE_FALSE(nf);
  CHECK(nf.err().code == errc::not_found);
}

TEST_CASE("signals by number or name", "[codec][procs]") {
  CHECK(*codec::parse_signal_value("9") == 9);
  CHECK(*codec::parse_signal_value("64") == 64);
  CHECK(*codec::parse_signal_value("SIGTERM") == 15);
  CHECK(*codec::parse_signal_value("term") == 15);
  CHECK(*codec::parse_signal_value("HUP") == 1);
  for (auto bad : {"", "0", "65", "-1", "1000", "SIGNOPE", "9x"}) {
    auto e = codec::parse_signal_value(bad);
    REQUIRE_FALSE(e);
    CHECK(e.err().code == errc::invalid_argument);
  }
  CHECK(*codec::parse_kill("") == 9);
  CHECK(*codec::parse_kill("{}") == 9);
  CHECK(*codec::parse_kill(R"({"signal": 15})") == 15);
  CHECK(*codec::parse_kill(R"({"signal": "SIGINT"})") == 2);
  for (auto bad : {"x", "[]", R"({"signal": 1.5})", R"({"signal": true})",
                   R"({"signal": 9, "pid": 3})", R"({"signal": 0})"})
    CHECK_FALSE(codec::parse_kill(bad));
}

TEST_CASE("background and process-table JSON", "[codec][procs]") {
  background_process b;
  b.pid = 12;
  b.argv = {"/bin/sh", "-c", "npm run dev"};
  b.started_at_ms = 1500;
  b.result.stdout_data = "so far";
  auto j = json::parse(codec::encode(b));
  CHECK(j["pid"] == 12);
  CHECK(j["cmd"] == "npm run dev");
  CHECK(j["state"] == "running");
  CHECK(j["exit_code"].is_null());
  CHECK(j["stdout"] == "so far");
  CHECK(j["started_at"] == 1.5);
  b.running = false;
  b.result.exit_code = 3;
  j = json::parse(codec::encode(b));
  CHECK(j["state"] == "exited");
  CHECK(j["exit_code"] == 3);
  auto back = codec::decode_background(codec::encode(b));
  REQUIRE(back);
  CHECK(back->pid == 12);
  CHECK(back->argv == b.argv);
  CHECK_FALSE(back->running);
  CHECK(back->result.exit_code == 3);
  CHECK_FALSE(codec::decode_background("nope"));

  process_info p;
  p.pid = 5;
  p.ppid = 1;
  p.argv = {"sleep", "30"};
  p.name = "sleep";
  p.state = "S";
  process_info z;
  z.pid = 6;
  z.name = "defunct";
  z.state = "Z";
  j = json::parse(codec::encode(std::vector<process_info>{p, z}));
  REQUIRE(j["processes"].size() == 2);
  CHECK(j["processes"][0]["cmd"] == "sleep 30");
  CHECK(j["processes"][0]["background"] == false);
  CHECK(j["processes"][1]["cmd"] == "[defunct]");
}

TEST_CASE("init protocol: ps, signal and started frames", "[init][procs]") {
  std::vector<proto::proc_entry> v(2);
  v[0].pid = 1;
  v[0].comm = "dsec-init";
  v[0].argv = {"dsec-init"};
  v[0].state = 'S';
  v[1].pid = 9;
  v[1].ppid = 1;
  v[1].start_ms = 123456789;
  v[1].comm = "sleep";
  v[1].argv = {"sleep", "1"};
  auto frame = proto::encode_ps(7, v);
  proto::header h;
  REQUIRE(proto::peek_frame(frame, h) == proto::parse::complete);
  CHECK(h.type == proto::msg::ps_list);
  CHECK(h.id == 7);
  std::vector<proto::proc_entry> out;
  REQUIRE(proto::decode_ps(std::string_view(frame).substr(proto::header_size), out));
  REQUIRE(out.size() == 2);
  CHECK(out[1].pid == 9);
  CHECK(out[1].ppid == 1);
  CHECK(out[1].start_ms == 123456789);
  CHECK(out[1].argv == v[1].argv);
  CHECK(out[0].state == 'S');
  // Truncated or lying bodies fail, never over-read.
  auto body = std::string(frame).substr(proto::header_size);
  CHECK_FALSE(proto::decode_ps(body.substr(0, body.size() - 1), out));
  std::string lie = proto::writer(proto::msg::ps_list, 1).u32(1u << 30).finish();
  CHECK_FALSE(proto::decode_ps(std::string_view(lie).substr(proto::header_size), out));

  proto::signal_msg s{42, 15, true};
  auto sf = proto::encode(3, s);
  REQUIRE(proto::peek_frame(sf, h) == proto::parse::complete);
  CHECK(h.type == proto::msg::signal);
  proto::signal_msg s2;
  REQUIRE(proto::decode(std::string_view(sf).substr(proto::header_size), s2));
  CHECK(s2.pid == 42);
  CHECK(s2.signo == 15);
  CHECK(s2.group);
  CHECK_FALSE(proto::decode(std::string_view(sf).substr(proto::header_size, 5), s2));
}
