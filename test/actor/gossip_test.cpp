// Deterministic actor tests of the gossip actor (actors/gossip_actor.hpp) on
// CAF's test coordinator, with test dummies for the lifecycle actor (answers
// status_atom as the test scripts it) and the placement actor (records every
// view it is pushed). The actor runs its real memberlist; its timers (tick,
// load, leave linger, request timeout) move only when the test advances the
// coordinator's clock. No sleeps, no root.
//
// A lone node only: the actor takes a gossip::udp_transport (not the
// gossip::transport interface) and reads datagrams on its own thread, so
// peers that join or die through the in-memory network cannot be wired in
// without changing actors/gossip_actor.*; the memberlist's joins and deaths
// are covered by test/gossip/ instead.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/gossip_actor.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "gossip/udp_transport.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;
using namespace std::chrono_literals;

namespace {

/// How the dummy lifecycle answers status_atom.
enum class status_mode { answer, fail, silent };

/// What the dummies saw and answer, shared with the test.
struct world {
  status_mode mode = status_mode::answer;
  node_status status;
  int status_requests = 0;
  /// Promises the silent lifecycle keeps open (never delivered).
  std::vector<caf::response_promise> unanswered;
  /// Every view pushed to placement, oldest first.
  std::vector<std::vector<member_info>> views;
};

caf::behavior dummy_lifecycle(caf::event_based_actor* self, std::shared_ptr<world> w) {
  return {
    [=](status_atom) {
      ++w->status_requests;
      auto rp = self->make_response_promise();
      if (w->mode == status_mode::answer)
        rp.deliver(w->status);
      else if (w->mode == status_mode::fail)
        rp.deliver(caf::make_error(caf::sec::runtime_error));
      else
        w->unanswered.push_back(rp);
      return rp;
    },
  };
}

caf::behavior dummy_placement(caf::event_based_actor*, std::shared_ptr<world> w) {
  return {
    [=](view_atom, std::vector<member_info>& v) { w->views.push_back(std::move(v)); },
  };
}

struct fixture : test::coordinated_system {
  std::shared_ptr<world> w = std::make_shared<world>();
  node_context_ptr ctx = std::make_shared<node_context>();
  caf::actor lifecycle;
  caf::actor placement;
  gossip_actor gossip;

  fixture() {
    ctx->config.node_id = "n-gossip";
    // Only an identity here: a lone node sends to nobody.
    ctx->config.advertise = "127.0.0.1:7700";
    w->status.sandboxes = 3;
    w->status.creating = 1;
    w->status.memory_free_mb = 2048;
    w->status.layers = {"base/busybox@1"};
    lifecycle = sys->spawn(dummy_lifecycle, w);
    placement = sys->spawn(dummy_placement, w);
  }

  ~fixture() {
    if (gossip)
      caf::anon_send_exit(gossip, caf::exit_reason::user_shutdown);
    for (auto& a : {placement, lifecycle})
      if (a)
        caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    drive();
  }

  /// Spawns the gossip actor on a loopback UDP port nobody else sends to.
  void start(std::vector<std::string> seeds = {}) {
    auto net = gossip::udp_transport::open("127.0.0.1", 0);
    REQUIRE(net);
    gossip = sys->spawn(gossip_behavior, ctx, caf::actor_cast<lifecycle_actor>(lifecycle),
                        caf::actor_cast<placement_actor>(placement),
                        std::shared_ptr<gossip::udp_transport>{std::move(*net)}, std::move(seeds));
    drive();
  }

  void drive() {
    while (sched->run() > 0) {
    }
  }

  /// Moves the coordinator's clock by `d` and runs what became due.
  void advance(std::chrono::milliseconds d) {
    sched->advance_time(d);
    drive();
  }

  std::vector<member_info> nodes() {
    auto out = test::send_only<std::vector<member_info>>(*sys, gossip, nodes_atom::value);
    drive();
    REQUIRE(out->has_value());
    auto& answer = **out;
    REQUIRE(answer.ok());
    return std::move(*answer);
  }

  /// This node's entry in the nodes answer (a lone node: the only one).
  member_info self_info() {
    auto v = nodes();
    REQUIRE(v.size() == 1);
    return v.front();
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "gossip: a new node pushes its view to placement and answers nodes",
                 "[actor][gossip]") {
  start();
  REQUIRE(!w->views.empty());
  auto& first = w->views.front();
  REQUIRE(first.size() == 1);
  CHECK(first[0].id == "n-gossip");
  CHECK(first[0].address == "127.0.0.1:7700");
  CHECK(first[0].state == "alive");
  CHECK(first[0].incarnation > 0); // seconds since the epoch: a restart wins
  auto self = self_info();
  CHECK(self.id == "n-gossip");
  CHECK(self.state == "alive");
  CHECK(self.incarnation == first[0].incarnation);
}

TEST_CASE_METHOD(fixture, "gossip: the lifecycle's status becomes this node's load, every second",
                 "[actor][gossip]") {
  start();
  CHECK(w->status_requests == 1);
  auto self = self_info();
  CHECK(self.free_memory_mb == 2048);
  CHECK(self.sandboxes == 3);
  CHECK(self.creating == 1);
  CHECK(self.accepting);
  // The egress sources digest rides first (issue 29; empty: no --egress-sources).
  CHECK(self.layers == std::vector<std::string>{"egress-sources:", "base/busybox@1"});
  w->status.sandboxes = 5;
  w->status.memory_free_mb = 1024;
  advance(999ms);
  CHECK(w->status_requests == 1);
  CHECK(self_info().sandboxes == 3);
  advance(1ms);
  CHECK(w->status_requests == 2);
  self = self_info();
  CHECK(self.sandboxes == 5);
  CHECK(self.free_memory_mb == 1024);
}

TEST_CASE_METHOD(fixture, "gossip: a lifecycle that fails is survived and asked again",
                 "[actor][gossip]") {
  w->mode = status_mode::fail;
  start();
  CHECK(w->status_requests == 1);
  CHECK(self_info().sandboxes == 0); // no load yet
  w->mode = status_mode::answer;
  advance(1000ms);
  CHECK(w->status_requests == 2);
  CHECK(self_info().sandboxes == 3);
}

TEST_CASE_METHOD(fixture, "gossip: a silent lifecycle gets one request at a time, and a timeout",
                 "[actor][gossip]") {
  w->mode = status_mode::silent;
  start();
  CHECK(w->status_requests == 1);
  for (int s = 1; s <= 9; ++s)
    advance(1000ms);
  // Nine load ticks came while the first request was in flight: none overlapped.
  CHECK(w->status_requests == 1);
  CHECK(self_info().state == "alive");
  // The request times out at local_wait (10 s); the load tick after that asks again.
  static_assert(local_wait == std::chrono::seconds(10));
  advance(1000ms);
  advance(1000ms);
  CHECK(w->status_requests == 2);
}

TEST_CASE_METHOD(fixture, "gossip: leave answers once the leave had time to spread",
                 "[actor][gossip]") {
  start();
  auto first = test::send_only<bool>(*sys, gossip, leave_atom::value);
  drive();
  CHECK(!first->has_value());
  auto self = self_info();
  CHECK(self.state == "left");
  advance(500ms);
  // A second caller during the linger is answered with the first.
  auto second = test::send_only<bool>(*sys, gossip, leave_atom::value);
  drive();
  advance(299ms);
  CHECK(!first->has_value());
  CHECK(!second->has_value());
  advance(1ms);
  REQUIRE(first->has_value());
  REQUIRE(second->has_value());
  auto& a = **first;
  auto& b = **second;
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a);
  CHECK(*b);
  // A leaving node's next load report takes no new sandboxes.
  advance(200ms);
  CHECK(w->status_requests == 2);
  CHECK(!self_info().accepting);
}

TEST_CASE_METHOD(fixture, "gossip: a bad seed is reported and the node runs alone",
                 "[actor][gossip]") {
  start({""});
  REQUIRE(!w->views.empty());
  CHECK(w->views.front().size() == 1);
  CHECK(self_info().state == "alive");
}
