// The job-level types (job_result, job_item_error) and the TTL fields of
// sandbox_info and sandbox_spec cross processes: each survives a message
// round trip with every field (an unregistered type would arrive empty).
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/atoms.hpp"
#include "actors/wire_types.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"

namespace dsec {

namespace {

struct job_wire_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  job_wire_fixture() {
    add_wire_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  caf::message through_wire(caf::message m) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    REQUIRE_FALSE(sink(m));
    caf::message out;
    caf::binary_deserializer source{*sys, buf};
    REQUIRE_FALSE(source(out));
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(job_wire_fixture, "job results survive a message round trip", "[actor][wire]") {
  job_result r;
  r.done = {"n1.a", "n2.b"};
  r.errors.push_back({"n1.c", "n1", errc::unavailable, "pause n1.c: sandbox n1.c is failed"});
  r.errors.push_back({"", "n3", errc::timeout, "pause job on node n3: request timed out"});
  auto m = through_wire(caf::make_message(r));
  REQUIRE(m.match_elements<job_result>());
  auto& back = m.get_as<job_result>(0);
  CHECK(back.done == r.done);
  REQUIRE(back.errors.size() == 2);
  CHECK(back.errors[0].id == "n1.c");
  CHECK(back.errors[0].node == "n1");
  CHECK(back.errors[0].code == errc::unavailable);
  CHECK(back.errors[0].message == r.errors[0].message);
  CHECK(back.errors[1].id.empty());
  CHECK(back.errors[1].code == errc::timeout);
  // The request as the SDK and peers send it.
  std::map<std::string, std::string> labels{{"job", "grpo-7"}};
  auto req = through_wire(caf::make_message(job_atom::value, labels, true, true));
  REQUIRE((req.match_elements<job_atom, std::map<std::string, std::string>, bool, bool>()));
  CHECK((req.get_as<std::map<std::string, std::string>>(1) == labels));
}

TEST_CASE_METHOD(job_wire_fixture, "the TTL fields survive a message round trip",
                 "[actor][wire]") {
  sandbox_spec spec;
  spec.layers = {"base/busybox@1"};
  spec.paused_ttl_s = 77;
  auto ms = through_wire(caf::make_message(spec));
  REQUIRE(ms.match_elements<sandbox_spec>());
  CHECK(ms.get_as<sandbox_spec>(0).paused_ttl_s == 77);
  sandbox_info info;
  info.id = "n1.a";
  info.state = sandbox_state::paused;
  info.ttl_s = 60;
  info.paused_ttl_s = 77;
  info.ttl_left_ms = 12'345;
  info.paused_expires_at_ms = 1'700'000'077'000;
  auto mi = through_wire(caf::make_message(info));
  REQUIRE(mi.match_elements<sandbox_info>());
  auto& b = mi.get_as<sandbox_info>(0);
  CHECK(b.ttl_s == 60);
  CHECK(b.paused_ttl_s == 77);
  CHECK(b.ttl_left_ms == 12'345);
  CHECK(b.paused_expires_at_ms == info.paused_expires_at_ms);
}

TEST_CASE_METHOD(job_wire_fixture, "a spec's image and an info's image cross to peers",
                 "[actor][wire]") {
  // Placement forwards the spec to the node that creates (and pulls).
  sandbox_spec spec;
  spec.image = "127.0.0.1:5000/team/py:3.11";
  spec.layers = {"ws/task@3"};
  auto ms = through_wire(caf::make_message(create_atom::value, spec));
  REQUIRE((ms.match_elements<create_atom, sandbox_spec>()));
  CHECK(ms.get_as<sandbox_spec>(1).image == spec.image);
  CHECK(ms.get_as<sandbox_spec>(1).layers == spec.layers);
  sandbox_info info;
  info.image = spec.image;
  info.layers = {"img/127.0.0.1-5000/team/py@sha256-0123", "ws/task@3"};
  auto mi = through_wire(caf::make_message(info));
  REQUIRE(mi.match_elements<sandbox_info>());
  CHECK(mi.get_as<sandbox_info>(0).image == info.image);
  CHECK(mi.get_as<sandbox_info>(0).layers == info.layers);
}

} // namespace dsec
