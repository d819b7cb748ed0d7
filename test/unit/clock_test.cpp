// Table tests of the exec wait bounds (core/clock.hpp): the sandbox's own
// limit rounds up, every hop waits limit + its slack, the outer slack exceeds
// the inner one, and an exec without a limit is waited for without a bound.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>

#include "core/clock.hpp"

using namespace dsec;
using std::chrono::milliseconds;

TEST_CASE("exec_limit_ms rounds up and treats <= 0 as no limit", "[clock]") {
  struct row { double timeout_s; int64_t ms; };
  const row rows[] = {
    {0, 0},          {-1, 0},         {-0.0005, 0},    {0.0001, 1},  {0.001, 1},
    {0.0015, 2},     {0.5, 500},      {1, 1000},       {2.5, 2500},  {30, 30000},
    {604800, 604800000}, {1e9, 1000000000000},
  };
  for (const auto& r : rows) {
    INFO(r.timeout_s);
    CHECK(exec_limit_ms(r.timeout_s) == r.ms);
  }
  CHECK(exec_limit_ms(std::nan("")) == 0);
}

TEST_CASE("exec_wait is the limit plus the hop's slack", "[clock]") {
  struct row { double timeout_s; milliseconds slack; int64_t ms; };
  const row rows[] = {
    {1, exec_slack_inner, 31000},
    {1, exec_slack_outer, 61000},
    {0.5, exec_slack_inner, 30500},
    {2.0005, exec_slack_outer, 62001},
    {300, exec_slack_inner, 330000},
    {10, milliseconds{0}, 10000},
    {10, milliseconds{1234}, 11234},
  };
  for (const auto& r : rows) {
    INFO(r.timeout_s << " + " << r.slack.count());
    auto w = exec_wait(r.timeout_s, r.slack);
    REQUIRE(w);
    CHECK(w->count() == r.ms);
  }
  for (double none : {0.0, -5.0, std::nan("")}) {
    INFO(none);
    CHECK_FALSE(exec_wait(none, exec_slack_inner));
  }
}

TEST_CASE("outer hops wait longer than inner ones", "[clock]") {
  CHECK(exec_slack_inner == milliseconds{30000});
  CHECK(exec_slack_outer == milliseconds{60000});
  CHECK(exec_slack_outer > exec_slack_inner);
  for (double t : {0.001, 1.0, 59.9, 3600.0})
    CHECK(*exec_wait(t, exec_slack_outer) > *exec_wait(t, exec_slack_inner));
}

TEST_CASE("now_ms is Unix milliseconds", "[clock]") {
  auto a = now_ms();
  CHECK(a > 1700000000000); // after 2023-11
  auto b = now_ms();
  CHECK(b >= a);
}

TEST_CASE("every call kind waits longer at the front than at the peer hop", "[clock]") {
  struct row { const char* kind; milliseconds peer; milliseconds front; };
  const row rows[] = {
    {"call", call_wait(hop::peer), call_wait(hop::front)},
    {"create", create_wait(hop::peer), create_wait(hop::front)},
    {"list", list_wait(hop::peer), list_wait(hop::front)},
    {"job", job_wait(hop::peer), job_wait(hop::front)},
    {"process wait 0", call_wait_after(hop::peer, 0), call_wait_after(hop::front, 0)},
    {"process wait 30 s", call_wait_after(hop::peer, 30000), call_wait_after(hop::front, 30000)},
    {"replay", replay_wait(hop::peer), replay_wait(hop::front)},
    {"exec 1 s", *exec_wait(1.0, hop::peer), *exec_wait(1.0, hop::front)},
  };
  for (const auto& r : rows) {
    INFO(r.kind);
    CHECK(r.front > r.peer);
    // Placement may first connect to the peer: its error still comes first.
    CHECK(r.front > r.peer + connect_wait);
  }
}

TEST_CASE("the front door's bounds are the named ones", "[clock]") {
  CHECK(call_wait(hop::front) == milliseconds{180000});
  CHECK(create_wait(hop::front) == milliseconds{300000});
  CHECK(create_wait(hop::peer) == call_wait_peer);
  CHECK(list_wait(hop::front) == milliseconds{15000});
  CHECK(job_wait(hop::front) == milliseconds{210000});
  CHECK(call_wait_after(hop::front, -5) == call_wait_front);
  CHECK(call_wait_after(hop::front, 1500) == milliseconds{181500});
  CHECK(*exec_wait(2.0, hop::front) == milliseconds{62000});
  CHECK(*exec_wait(2.0, hop::peer) == milliseconds{32000});
  CHECK_FALSE(exec_wait(0.0, hop::front));
  CHECK(connect_wait_front > connect_wait);
}
