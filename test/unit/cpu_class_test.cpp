// CPU classes in the public API: the PATCH route, its body parser, the
// answer, the class check and sandbox_info's cpu_class in JSON.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/gateway_routes.hpp"
#include "core/json_codec.hpp"
#include "core/validate.hpp"

using namespace dsec;
namespace codec = dsec::json_codec;

TEST_CASE("PATCH /v1/sandboxes/{id} is the update route", "[cpu_class]") {
  bool not_allowed = false;
  auto r = parse_route("PATCH", "/v1/sandboxes/n-1.abc", not_allowed);
  REQUIRE(r);
  CHECK(r->kind == route::update_sandbox);
  CHECK(r->id == "n-1.abc");
  // PUT .../network stays as it was.
  auto n = parse_route("PUT", "/v1/sandboxes/n-1.abc/network", not_allowed);
  REQUIRE(n);
  CHECK(n->kind == route::set_network);
  // PATCH elsewhere: 405.
  auto bad = parse_route("PATCH", "/v1/sandboxes", not_allowed);
  CHECK(!bad);
  CHECK(not_allowed);
}

TEST_CASE("cpu classes are latency or batch", "[cpu_class]") {
  CHECK(validate_cpu_class("latency"));
  CHECK(validate_cpu_class("batch"));
  for (auto* bad : {"", "Batch", "idle", "latency ", "best-effort"}) {
    auto st = validate_cpu_class(bad);
    CHECK(!st);
    CHECK(st.err().code == errc::invalid_argument);
    CHECK(st.err().message.find("cpu_class") != std::string::npos);
  }
  sandbox_spec s;
  s.layers = {"base/busybox@1"};
  s.cpu_class = "fast";
  CHECK(!validate(s));
  s.cpu_class = "batch";
  CHECK(validate(s));
}

TEST_CASE("update bodies: class, network, both", "[cpu_class]") {
  auto a = codec::parse_update(R"({"cpu_class":"batch"})");
  REQUIRE(a);
  CHECK(a->cpu_class == "batch");
  CHECK(!a->set_network);

  auto b = codec::parse_update(R"({"network":{"allow":["1.2.3.4:443"]}})");
  REQUIRE(b);
  CHECK(b->cpu_class.empty());
  CHECK(b->set_network);
  CHECK(b->network.allow == std::vector<std::string>{"1.2.3.4:443"});

  auto c = codec::parse_update(R"({"cpu_class":"latency","network":{"mode":"none"}})");
  REQUIRE(c);
  CHECK(c->cpu_class == "latency");
  CHECK(c->set_network);
  CHECK(c->network.allow.empty());
}

TEST_CASE("update bodies that are refused name what is wrong", "[cpu_class]") {
  struct row {
    const char* body;
    const char* names;
  };
  row rows[] = {
    {"", "empty"},
    {"   ", "empty"},
    {"{}", "nothing to change"},
    {"[]", "not a JSON object"},
    {"{not json", "not a JSON object"},
    {R"({"cpu_class":"fast"})", "cpu_class"},
    {R"({"cpu_class":3})", "cpu_class"},
    {R"({"cpu_class":null})", "cpu_class"},
    {R"({"cpu":2})", "unknown field \"cpu\""},
    {R"({"cpu_class":"batch","extra":1})", "unknown field \"extra\""},
    {R"({"network":"none"})", "network"},
    {R"({"network":{"mode":"open"}})", "network.mode"},
    {R"({"network":{"allow":["not an address"]}})", "network"},
    {R"({"network":{"allow":[],"denied":[]}})", "denied"},
    {R"({"network":{"allow":[],"deny":["pypi.org:*"]}})", "network.deny"},
  };
  for (auto& r : rows) {
    INFO(r.body);
    auto u = codec::parse_update(r.body);
    REQUIRE(!u);
    CHECK(u.err().code == errc::invalid_argument);
    CHECK(u.err().message.find(r.names) != std::string::npos);
  }
}

TEST_CASE("sandbox info carries its cpu class; the update answer what was applied",
          "[cpu_class]") {
  sandbox_info info;
  info.id = "n-1.abc";
  info.cpu_class = "batch";
  auto j = nlohmann::json::parse(codec::encode(info));
  CHECK(j["cpu_class"] == "batch");
  auto back = codec::decode_sandbox(codec::encode(info));
  REQUIRE(back);
  CHECK(back->cpu_class == "batch");
  // An older node's answer without the field reads as latency.
  auto old = codec::decode_sandbox(R"({"id":"n-1.abc","state":"running"})");
  REQUIRE(old);
  CHECK(old->cpu_class == "latency");

  codec::sandbox_update up;
  up.cpu_class = "batch";
  up.set_network = true;
  auto a = nlohmann::json::parse(codec::encode_update(info, up));
  CHECK(a["id"] == "n-1.abc");
  CHECK(a["cpu_class"] == "batch");
  CHECK(a["applied"] == nlohmann::json::array({"cpu_class", "network"}));
  up.cpu_class.clear();
  a = nlohmann::json::parse(codec::encode_update(info, up));
  CHECK(a["applied"] == nlohmann::json::array({"network"}));
}

TEST_CASE("the record keeps the class, so a restarted node keeps it", "[cpu_class]") {
  codec::sandbox_record rec;
  rec.id = "n-1.abc";
  rec.spec.layers = {"base/busybox@1"};
  rec.spec.cpu_class = "batch";
  rec.created_at_ms = 1700000000000;
  rec.digests = {"sha256:00"};
  auto back = codec::decode_record(codec::encode(rec));
  REQUIRE(back);
  CHECK(back->spec.cpu_class == "batch");
  CHECK(back->cpu_class.empty());
  // A PATCH changed it: the spec stays as created (request_id matching),
  // the class it runs in now is kept beside it.
  rec.spec.cpu_class = "latency";
  rec.cpu_class = "batch";
  auto j = nlohmann::json::parse(codec::encode(rec));
  CHECK(j["cpu_class"] == "batch");
  CHECK(j["spec"]["cpu_class"] == "latency");
  back = codec::decode_record(codec::encode(rec));
  REQUIRE(back);
  CHECK(back->spec.cpu_class == "latency");
  CHECK(back->cpu_class == "batch");
  // A record with a class this node does not know is not a record.
  j["cpu_class"] = "turbo";
  CHECK(!codec::decode_record(j.dump()));
}
