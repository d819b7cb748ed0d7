// Deterministic actor tests of the placement actor (the node's front door) on
// CAF's test coordinator: how it routes by the sandbox id's owner, answers for
// owners the gossip view holds dead, pins creates, and hands this node's calls
// to the lifecycle actor, here a scripted stand-in that records what reached
// it. Calls across nodes run here too: two placement actors in one process,
// connected through peer_links' in-process connector (test/actor/
// test_system.hpp) instead of TCP, so a create routed to a peer, an exec
// forwarded to its owner, a slow or dying owner and a peer of another
// protocol are driven step by step (test/e2e/test_cluster.py runs the same
// flows between real nodes).
#include <catch2/catch.hpp>

#include <algorithm>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/placement.hpp"
#include "policy/request_owner.hpp" // issue 28
#include "core/clock.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// What reached the stand-in lifecycle actor.
struct seen {
  /// The node it stands in for: its sandboxes are "<node>.s1".
  std::string node = "n-a";
  std::vector<std::string> calls; // "create", "info <id>", ...
  sandbox_spec last_spec;
  /// Info and exec are taken and never answered (a stuck node).
  bool hang = false;
  std::vector<caf::response_promise> held;
  /// Status is taken and never answered either (a cut connection, issue 28).
  bool hang_status = false;
};

/// This node's lifecycle, scripted: every sandbox it knows runs.
caf::behavior fake_lifecycle(caf::event_based_actor* self, std::shared_ptr<seen> s) {
  return {
    [s](create_atom, sandbox_spec& spec) {
      s->calls.push_back("create");
      s->last_spec = spec;
      sandbox_info info;
      info.id = s->node + ".s1";
      info.node = s->node;
      info.state = sandbox_state::running;
      return info;
    },
    [self, s](info_atom, std::string& id) -> caf::result<sandbox_info> {
      s->calls.push_back("info " + id);
      if (s->hang) {
        s->held.push_back(self->make_response_promise());
        return s->held.back();
      }
      sandbox_info info;
      info.id = id;
      info.state = sandbox_state::running;
      return info;
    },
    [s](destroy_atom, std::string& id) {
      s->calls.push_back("destroy " + id);
      return true;
    },
    [self, s](exec_atom, std::string& id, exec_request&,
              uint64_t token) -> caf::result<exec_result> {
      s->calls.push_back("exec " + id + " " + std::to_string(token));
      if (s->hang) {
        s->held.push_back(self->make_response_promise());
        return s->held.back();
      }
      exec_result r;
      r.stdout_data = "ran in " + id;
      return r;
    },
    // The one streaming form: chunks to the sink, then the answer.
    [self, s](stream_atom, std::string& id, exec_request&, caf::actor& sink, uint64_t token) {
      s->calls.push_back("stream " + id);
      self->send(sink, stream_atom::value, token, exec_chunk{1, "chunk of " + id});
      return exec_result{};
    },
    [s](list_atom, label_map& labels) {
      s->calls.push_back("list " + std::to_string(labels.size()));
      sandbox_info info;
      info.id = s->node + ".s1";
      return std::vector<sandbox_info>{info};
    },
    [s](job_atom, label_map&, bool pause) {
      s->calls.push_back(pause ? "pause job" : "resume job");
      job_result r;
      r.done = {s->node + ".s1"};
      return r;
    },
    [self, s](status_atom) -> caf::result<node_status> {
      s->calls.push_back("status");
      if (s->hang_status) {
        s->held.push_back(self->make_response_promise());
        return s->held.back();
      }
      node_status ns;
      ns.node_id = s->node;
      ns.sandboxes = 7;
      return ns;
    },
  };
}

struct fixture : test::coordinated_system {
  node_context_ptr ctx = std::make_shared<node_context>();
  std::shared_ptr<seen> s = std::make_shared<seen>();
  placement_actor front;

  fixture() {
    ctx->config.node_id = "n-a";
    ctx->config.listen = "127.0.0.1:7000";
    auto lc = caf::actor_cast<lifecycle_actor>(sys->spawn(fake_lifecycle, s));
    front = sys->spawn(placement_behavior, ctx, lc, image_fetch_actor{}, fncall_actor{});
    sched->run();
  }

  ~fixture() {
    caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    sched->run();
  }

  template <class T, class... Ts>
  expected<T> ask(Ts... xs) {
    auto out = test::send_only<T>(*sys, front, xs...);
    sched->run();
    REQUIRE(out->has_value());
    return std::move(**out);
  }

  /// The gossip view: this node alive plus `others` ("id=state").
  void view(std::vector<std::pair<std::string, std::string>> others) {
    std::vector<member_info> v;
    member_info me;
    me.id = "n-a";
    me.address = "127.0.0.1:7000";
    me.state = "alive";
    v.push_back(me);
    for (auto& [id, state] : others) {
      member_info m;
      m.id = id;
      m.address = "127.0.0.1:7001";
      m.state = state;
      v.push_back(m);
    }
    caf::anon_send(front, view_atom::value, std::move(v));
    sched->run();
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "alone, every call about a local sandbox goes to the lifecycle",
                 "[actor][placement]") {
  auto created = ask<sandbox_info>(create_atom::value, sandbox_spec{});
  REQUIRE(created.ok());
  CHECK(created->id == "n-a.s1");
  auto ran = ask<exec_result>(exec_atom::value, std::string{"n-a.s1"}, exec_request{},
                              uint64_t{9});
  REQUIRE(ran.ok());
  CHECK(ran->stdout_data == "ran in n-a.s1");
  auto destroyed = ask<bool>(destroy_atom::value, std::string{"n-a.s1"});
  REQUIRE(destroyed.ok());
  CHECK(*destroyed);
  CHECK(s->calls == std::vector<std::string>{"create", "exec n-a.s1 9", "destroy n-a.s1"});
}

TEST_CASE_METHOD(fixture, "a stream's chunks reach the caller's sink before its answer",
                 "[actor][placement]") {
  auto chunks = std::make_shared<std::vector<std::string>>();
  auto sink = sys->spawn([chunks](caf::event_based_actor*) -> caf::behavior {
    return {[chunks](stream_atom, uint64_t token, exec_chunk& c) {
      chunks->push_back(std::to_string(token) + ":" + c.data);
    }};
  });
  auto r = ask<exec_result>(stream_atom::value, std::string{"n-a.s1"}, exec_request{}, sink,
                            uint64_t{5});
  REQUIRE(r.ok());
  CHECK(*chunks == std::vector<std::string>{"5:chunk of n-a.s1"});
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "ids that name no member, or no id at all, are refused here",
                 "[actor][placement]") {
  auto bad = ask<sandbox_info>(info_atom::value, std::string{"no-dot"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().code == errc::invalid_argument);
  auto stranger = ask<sandbox_info>(info_atom::value, std::string{"n-x.s1"});
  REQUIRE_FALSE(stranger.ok());
  CHECK(stranger.err().code == errc::not_found);
  CHECK(stranger.err().message.find("not a member") != std::string::npos);
  CHECK(s->calls.empty()); // none of them reached the lifecycle
}

TEST_CASE_METHOD(fixture, "a sandbox whose owner died is lost: info says so, destroy is a 503",
                 "[actor][placement]") {
  view({{"n-b", "dead"}});
  auto info = ask<sandbox_info>(info_atom::value, std::string{"n-b.s9"});
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::lost);
  CHECK(info->node == "n-b");
  // Dead may be alive behind a partition (issue 28): not "deleted: false".
  auto dead = ask<bool>(destroy_atom::value, std::string{"n-b.s9"});
  REQUIRE_FALSE(dead.ok());
  CHECK(dead.err().code == errc::unavailable);
  CHECK(dead.err().message.find("n-b") != std::string::npos);
  view({{"n-b", "left"}});
  auto gone = ask<bool>(destroy_atom::value, std::string{"n-b.s9"});
  REQUIRE(gone.ok());
  CHECK_FALSE(*gone);
  auto ran = ask<exec_result>(exec_atom::value, std::string{"n-b.s9"}, exec_request{},
                              uint64_t{0});
  REQUIRE_FALSE(ran.ok());
  CHECK(ran.err().code == errc::unavailable);
  CHECK(ran.err().message.find("lost") != std::string::npos);
  CHECK(s->calls.empty());
}

TEST_CASE_METHOD(fixture, "a create pinned to this node is served here; to a dead one, refused",
                 "[actor][placement]") {
  view({{"n-b", "dead"}});
  sandbox_spec here;
  here.node = "n-a";
  REQUIRE(ask<sandbox_info>(create_atom::value, here).ok());
  CHECK(s->last_spec.node == "n-a");
  sandbox_spec there;
  there.node = "n-b";
  auto r = ask<sandbox_info>(create_atom::value, there);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::not_found);
  CHECK(r.err().message.find("is not alive (it is dead)") != std::string::npos);
  CHECK(s->calls == std::vector<std::string>{"create"});
}

TEST_CASE_METHOD(fixture, "nodes answers the view with this node first and its fresh load",
                 "[actor][placement]") {
  view({{"n-0", "alive"}, {"n-c", "suspect"}});
  auto nodes = ask<std::vector<member_info>>(nodes_atom::value);
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == 3);
  CHECK((*nodes)[0].id == "n-a");
  CHECK((*nodes)[0].sandboxes == 7);
  CHECK((*nodes)[1].id == "n-0");
  CHECK((*nodes)[2].id == "n-c");
}

TEST_CASE_METHOD(fixture, "a peer's part of a list or job is this node's own",
                 "[actor][placement]") {
  auto mine = ask<std::vector<sandbox_info>>(list_atom::value, label_map{{"a", "b"}}, true);
  REQUIRE(mine.ok());
  CHECK(mine->size() == 1);
  auto job = ask<job_result>(job_atom::value, label_map{{"run", "r1"}}, true, true);
  REQUIRE(job.ok());
  CHECK(job->done == std::vector<std::string>{"n-a.s1"});
  CHECK(s->calls == std::vector<std::string>{"list 1", "pause job"});
}

TEST_CASE_METHOD(fixture, "fncall and image rows answer unavailable when their actor is absent",
                 "[actor][placement]") {
  auto fn = ask<exec_result>(fncall_atom::value, fncall_request{});
  REQUIRE_FALSE(fn.ok());
  CHECK(fn.err().code == errc::unavailable);
  auto layer = ask<layer_info>(fetch_atom::value, std::string{"base/busybox@1"});
  REQUIRE_FALSE(layer.ok());
  CHECK(layer.err().code == errc::unavailable);
}

// -- two nodes in one process ----------------------------------------------------

namespace {

/// One node's front door and its scripted lifecycle.
struct test_node {
  node_context_ptr ctx = std::make_shared<node_context>();
  std::shared_ptr<seen> s = std::make_shared<seen>();
  lifecycle_actor lifecycle;
  placement_actor front;
};

/// Nodes n-a (127.0.0.1:7000) and n-b (127.0.0.1:7001), each with its own
/// lifecycle, connected through an in-process peer directory.
struct two_nodes : test::coordinated_system {
  test_node a, b;
  std::shared_ptr<test::peer_map> peers = std::make_shared<test::peer_map>();
  peer_connector directory;

  two_nodes() {
    directory = sys->spawn(test::peer_directory, peers);
    start(a, "n-a", "127.0.0.1:7000");
    start(b, "n-b", "127.0.0.1:7001");
    // Both alive; only n-b takes new sandboxes, so an unpinned create on n-a
    // is routed to n-b by the planner itself.
    view(a, false, true);
    view(b, false, true);
  }

  ~two_nodes() {
    for (auto* n : {&a, &b}) {
      n->s->held.clear(); // promises a stuck lifecycle never answered
      caf::anon_send_exit(n->front, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(n->lifecycle, caf::exit_reason::user_shutdown);
    }
    caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
    sched->run();
  }

  void start(test_node& n, const std::string& id, const std::string& listen) {
    n.ctx->config.node_id = id;
    n.ctx->config.listen = listen;
    n.s->node = id;
    n.lifecycle = caf::actor_cast<lifecycle_actor>(sys->spawn(fake_lifecycle, n.s));
    n.front = sys->spawn(placement_behavior, n.ctx, n.lifecycle, image_fetch_actor{},
                         fncall_actor{});
    sched->run();
    // The seam: this node's links connect through the directory, not TCP.
    auto* ptr = caf::actor_cast<caf::abstract_actor*>(n.front);
    auto* actor = dynamic_cast<placement_actor::stateful_base<placement_state>*>(ptr);
    REQUIRE(actor != nullptr);
    actor->state.peers.use(directory);
    test::publish(*sys, *peers, listen, n.front);
  }

  /// Pushes the gossip view to `n`: both nodes, alive unless said otherwise.
  void view(test_node& n, bool a_accepting, bool b_accepting, std::string b_state = "alive") {
    std::vector<member_info> v(2);
    v[0].id = "n-a";
    v[0].address = "127.0.0.1:7000";
    v[0].state = "alive";
    v[0].accepting = a_accepting;
    v[1].id = "n-b";
    v[1].address = "127.0.0.1:7001";
    v[1].state = std::move(b_state);
    v[1].accepting = b_accepting;
    caf::anon_send(n.front, view_atom::value, std::move(v));
    sched->run();
  }

  template <class T, class... Ts>
  expected<T> ask(test_node& n, Ts... xs) {
    auto out = test::send_only<T>(*sys, n.front, xs...);
    sched->run();
    REQUIRE(out->has_value());
    return std::move(**out);
  }
};

} // namespace

TEST_CASE_METHOD(two_nodes, "a create is routed to the peer that takes it; calls follow the owner",
                 "[actor][placement][peers]") {
  auto created = ask<sandbox_info>(a, create_atom::value, sandbox_spec{});
  REQUIRE(created.ok());
  CHECK(created->id == "n-b.s1");
  CHECK(b.s->last_spec.node == "n-b"); // forwarded pinned: n-b serves it or refuses
  auto ran = ask<exec_result>(a, exec_atom::value, std::string{"n-b.s1"}, exec_request{},
                              uint64_t{9});
  REQUIRE(ran.ok());
  CHECK(ran->stdout_data == "ran in n-b.s1");
  auto info = ask<sandbox_info>(a, info_atom::value, std::string{"n-b.s1"});
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::running);
  CHECK(a.s->calls.empty()); // nothing of it ran on n-a
  CHECK(b.s->calls
        == std::vector<std::string>{"create", "exec n-b.s1 9", "info n-b.s1"});
}

TEST_CASE_METHOD(two_nodes, "a list spans both nodes", "[actor][placement][peers]") {
  auto all = ask<std::vector<sandbox_info>>(a, list_atom::value, label_map{});
  REQUIRE(all.ok());
  std::vector<std::string> ids;
  for (auto& i : *all)
    ids.push_back(i.id);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::string>{"n-a.s1", "n-b.s1"});
}

TEST_CASE_METHOD(two_nodes, "an owner that dies fails the calls in flight with placement's error",
                 "[actor][placement][peers]") {
  b.s->hang = true;
  auto pending = test::send_only<exec_result>(*sys, a.front, exec_atom::value,
                                              std::string{"n-b.s1"}, exec_request{}, uint64_t{0});
  sched->run();
  CHECK(b.s->calls == std::vector<std::string>{"exec n-b.s1 0"});
  CHECK_FALSE(pending->has_value()); // n-b holds it
  caf::anon_send_exit(b.front, caf::exit_reason::kill);
  sched->run();
  REQUIRE(pending->has_value());
  auto& r = **pending;
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("node n-b went away") != std::string::npos);
  // n-b had the call: it may have run there, and the caller is told so.
  CHECK(r.err().message.find("a call already sent may have taken effect there")
        != std::string::npos);
  // Once gossip holds n-b dead, its sandboxes are lost, without a connect.
  peers->erase("127.0.0.1:7001");
  view(a, false, false, "dead");
  auto info = ask<sandbox_info>(a, info_atom::value, std::string{"n-b.s1"});
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::lost);
}

TEST_CASE_METHOD(two_nodes, "a peer that cannot be reached fails the call naming node and address",
                 "[actor][placement][peers]") {
  peers->erase("127.0.0.1:7001");
  auto r = ask<sandbox_info>(a, info_atom::value, std::string{"n-b.s1"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("connect to node n-b at 127.0.0.1:7001") != std::string::npos);
}

TEST_CASE_METHOD(two_nodes, "a slow peer yields placement's error before the caller's own timeout",
                 "[actor][placement][peers]") {
  b.s->hang = true;
  // The caller waits like the gateway does: the front hop's bound.
  auto r = test::send_within<sandbox_info>(*sys, caf::duration{call_wait(hop::front)}, a.front,
                                           info_atom::value, std::string{"n-b.s1"});
  sched->run();
  CHECK_FALSE(r->has_value());
  // Placement's wait on the peer ends first ...
  sched->advance_time(call_wait(hop::peer));
  sched->run();
  REQUIRE(r->has_value());
  REQUIRE_FALSE((*r)->ok());
  CHECK((*r)->err().code == errc::timeout);
  CHECK((*r)->err().message == "node n-b did not answer within 120 s");
}

TEST_CASE_METHOD(two_nodes, "a peer of another protocol is refused as a protocol mismatch",
                 "[actor][placement][peers]") {
  // n-b announces an interface without one of placement's calls.
  auto ifs = sys->message_types(b.front);
  auto dropped = *ifs.begin();
  ifs.erase(ifs.begin());
  (*peers)["127.0.0.1:7001"].interface = ifs;
  auto r = ask<exec_result>(a, exec_atom::value, std::string{"n-b.s1"}, exec_request{},
                            uint64_t{1});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("connect to node n-b at 127.0.0.1:7001: protocol mismatch: ")
        != std::string::npos);
  CHECK(r.err().message.find("first missing: " + dropped) != std::string::npos);
  CHECK(b.s->calls.empty()); // nothing reached n-b
  // An untyped actor is refused too.
  (*peers)["127.0.0.1:7001"].interface.clear();
  auto again = ask<exec_result>(a, exec_atom::value, std::string{"n-b.s1"}, exec_request{},
                                uint64_t{2});
  REQUIRE_FALSE(again.ok());
  CHECK(again.err().message.find("untyped actor") != std::string::npos);
}

TEST_CASE("protocol_mismatch accepts a peer that speaks at least this node's calls",
          "[actor][placement][peers]") {
  std::set<std::string> mine{"a", "b", "c"};
  CHECK(protocol_mismatch(mine, mine).empty());
  CHECK(protocol_mismatch(mine, {"a", "b", "c", "d"}).empty()); // newer: append-only
  CHECK(protocol_mismatch({}, {"x"}).empty());                   // untyped caller
  CHECK(protocol_mismatch(mine, {"a", "c"})
        == "the peer publishes 2 calls and lacks 1 of this node's 3; first missing: b");
  CHECK(protocol_mismatch(mine, {})
        == "the peer publishes an untyped actor, this node expects 3 calls");
}

// -- issue 28: unreachable owners ------------------------------------------------

TEST_CASE_METHOD(fixture, "a suspect owner fails calls at once with a 503 naming it unreachable",
                 "[actor][placement]") {
  view({{"n-b", "suspect"}});
  auto ran = ask<exec_result>(exec_atom::value, std::string{"n-b.s9"}, exec_request{},
                              uint64_t{0});
  REQUIRE_FALSE(ran.ok());
  CHECK(ran.err().code == errc::unavailable);
  CHECK(ran.err().message.find("node n-b is unreachable") != std::string::npos);
  CHECK(s->calls.empty());
}

TEST_CASE_METHOD(fixture, "a request_id whose owner is unreachable is refused, never made here",
                 "[actor][placement]") {
  view({{"n-b", "suspect"}});
  std::vector<member_info> v(2);
  v[0].id = "n-a";
  v[0].state = "alive";
  v[1].id = "n-b";
  v[1].state = "suspect";
  std::string theirs, ours;
  for (int i = 0; theirs.empty() || ours.empty(); ++i) {
    auto key = "key-" + std::to_string(i);
    (placement::request_owner(v, key)->id == "n-b" ? theirs : ours) = key;
  }
  sandbox_spec spec;
  spec.request_id = theirs;
  auto r = ask<sandbox_info>(create_atom::value, spec);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("belongs to node n-b, which is unreachable") != std::string::npos);
  CHECK(r.err().message.find(theirs) != std::string::npos);
  CHECK(s->calls.empty());
  spec.request_id = ours;
  REQUIRE(ask<sandbox_info>(create_atom::value, spec).ok());
  CHECK(s->calls == std::vector<std::string>{"create"});
}

TEST_CASE_METHOD(two_nodes, "a call over a cut connection fails within 2 s naming the node",
                 "[actor][placement][peers]") {
  b.s->hang = true;
  b.s->hang_status = true; // nothing comes back over the connection
  auto pending = test::send_only<exec_result>(*sys, a.front, exec_atom::value,
                                              std::string{"n-b.s1"}, exec_request{}, uint64_t{0});
  sched->run();
  CHECK_FALSE(pending->has_value());
  sched->advance_time(peer_watch::after); // the check asks n-b for its status
  sched->run();
  CHECK(b.s->calls == std::vector<std::string>{"exec n-b.s1 0", "status"});
  CHECK_FALSE(pending->has_value());
  sched->advance_time(peer_watch::within); // no answer: the calls fail
  sched->run();
  REQUIRE(pending->has_value());
  auto& r = **pending;
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("node n-b is unreachable") != std::string::npos);
  static_assert(peer_watch::after + peer_watch::within <= std::chrono::seconds(2));
}

TEST_CASE_METHOD(two_nodes, "a slow peer that answers its status check keeps the call waiting",
                 "[actor][placement][peers]") {
  b.s->hang = true; // exec hangs, status answers
  auto pending = test::send_only<exec_result>(*sys, a.front, exec_atom::value,
                                              std::string{"n-b.s1"}, exec_request{}, uint64_t{0});
  sched->run();
  for (int i = 0; i < 3; ++i) {
    sched->advance_time(peer_watch::after);
    sched->run();
    sched->advance_time(peer_watch::within);
    sched->run();
  }
  CHECK_FALSE(pending->has_value());
}

TEST_CASE_METHOD(two_nodes, "creates through one node take turns over the ring (issue 28)",
                 "[actor][placement][peers][ring]") {
  // Both take sandboxes and report room: the ring, not the local bonus, decides.
  std::vector<member_info> v(2);
  for (size_t i = 0; i < 2; ++i) {
    v[i].id = i == 0 ? "n-a" : "n-b";
    v[i].address = i == 0 ? "127.0.0.1:7000" : "127.0.0.1:7001";
    v[i].state = "alive";
    v[i].free_memory_mb = 64000;
  }
  caf::anon_send(a.front, view_atom::value, v);
  sched->run();
  std::map<std::string, int> owners;
  for (int i = 0; i < 6; ++i) {
    auto created = ask<sandbox_info>(a, create_atom::value, sandbox_spec{});
    REQUIRE(created.ok());
    ++owners[created->node];
  }
  CHECK(owners == std::map<std::string, int>{{"n-a", 3}, {"n-b", 3}});
  CHECK(b.s->last_spec.node == "n-b"); // still forwarded pinned
}
