// The process types (process_info, background_process and the list of
// process_info) cross processes: each is registered (a caf::message holding
// it survives serialization, which an unregistered type does not) and keeps
// every field.
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/atoms.hpp"
#include "actors/wire_types.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

struct wire_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  wire_fixture() {
    add_wire_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  /// A message as it crosses the wire: serialized with its type names.
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

TEST_CASE_METHOD(wire_fixture, "process wire types survive a message round trip",
                 "[actor][wire]") {
  process_info p;
  p.pid = 42;
  p.ppid = 1;
  p.argv = {"python3", "-m", "http.server"};
  p.name = "python3";
  p.state = "S";
  p.started_at_ms = 1'700'000'000'123;
  p.background = true;
  auto m = through_wire(caf::make_message(std::vector<process_info>{p, p}));
  REQUIRE(m.match_elements<std::vector<process_info>>());
  auto& v = m.get_as<std::vector<process_info>>(0);
  REQUIRE(v.size() == 2);
  CHECK(v[1].pid == 42);
  CHECK(v[1].ppid == 1);
  CHECK(v[1].argv == p.argv);
  CHECK(v[1].name == "python3");
  CHECK(v[1].state == "S");
  CHECK(v[1].started_at_ms == p.started_at_ms);
  CHECK(v[1].background);

  background_process b;
  b.pid = 7;
  b.argv = {"/bin/sh", "-c", "sleep 1"};
  b.started_at_ms = 5;
  b.running = false;
  b.result.exit_code = 3;
  b.result.stdout_data = std::string("o\0x", 3);
  b.result.stderr_data = "e";
  b.result.truncated = true;
  b.result.timed_out = true;
  b.result.duration_ms = 1.5;
  auto m2 = through_wire(caf::make_message(proc_atom::value, std::string("n.x"), b));
  REQUIRE((m2.match_elements<proc_atom, std::string, background_process>()));
  auto& b2 = m2.get_as<background_process>(2);
  CHECK(b2.pid == 7);
  CHECK(b2.argv == b.argv);
  CHECK(b2.started_at_ms == 5);
  CHECK_FALSE(b2.running);
  CHECK(b2.result.exit_code == 3);
  CHECK(b2.result.stdout_data == b.result.stdout_data);
  CHECK(b2.result.truncated);
  CHECK(b2.result.timed_out);
  CHECK(b2.result.duration_ms == 1.5);

  auto m3 = through_wire(caf::make_message(signal_atom::value, std::string("n.x"), int32_t{9},
                                           int32_t{15}, true));
  CHECK((m3.match_elements<signal_atom, std::string, int32_t, int32_t, bool>()));
  auto m4 = through_wire(caf::make_message(process_info{p}));
  REQUIRE(m4.match_elements<process_info>());
  CHECK(m4.get_as<process_info>(0).argv == p.argv);
}

} // namespace dsec

namespace dsec {

// The trajectory fields (exec_request::step, exec_result::replayed) and the
// trajectory messages cross the wire intact.
TEST_CASE_METHOD(wire_fixture, "trajectory fields and messages survive a round trip",
                 "[actor][wire]") {
  exec_request req;
  req.argv = {"echo", "hi"};
  req.step = "turn-3";
  auto m = through_wire(caf::make_message(exec_atom::value, std::string("n.x"), req, uint64_t{7}));
  REQUIRE((m.match_elements<exec_atom, std::string, exec_request, uint64_t>()));
  CHECK(m.get_as<exec_request>(2).step == "turn-3");
  exec_result res;
  res.replayed = true;
  res.stdout_data = "hi\n";
  auto m2 = through_wire(caf::make_message(res));
  REQUIRE(m2.match_elements<exec_result>());
  CHECK(m2.get_as<exec_result>(0).replayed);
  auto m3 = through_wire(caf::make_message(traj_atom::value, std::string("n.x"), int64_t{-1}));
  CHECK((m3.match_elements<traj_atom, std::string, int64_t>()));
  auto m4 = through_wire(caf::make_message(rebuilt_atom::value, std::string("n.y"),
                                           std::string("n.x"), uint64_t{4}));
  CHECK((m4.match_elements<rebuilt_atom, std::string, std::string, uint64_t>()));
}

} // namespace dsec
