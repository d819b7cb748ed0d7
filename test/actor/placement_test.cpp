// Deterministic actor tests of the placement actor (the node's front door) on
// CAF's test coordinator: how it routes by the sandbox id's owner, answers for
// owners the gossip view holds dead, pins creates, and hands this node's calls
// to the lifecycle actor, here a scripted stand-in that records what reached
// it. Calls that would cross nodes are not driven here (they need sockets;
// test/e2e/test_cluster.py runs them between real nodes).
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/placement.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// What reached the stand-in lifecycle actor.
struct seen {
  std::vector<std::string> calls; // "create", "info <id>", ...
  sandbox_spec last_spec;
};

/// This node's lifecycle, scripted: every sandbox it knows runs.
caf::behavior fake_lifecycle(caf::event_based_actor* self, std::shared_ptr<seen> s) {
  return {
    [s](create_atom, sandbox_spec& spec) {
      s->calls.push_back("create");
      s->last_spec = spec;
      sandbox_info info;
      info.id = "n-a.s1";
      info.node = "n-a";
      info.state = sandbox_state::running;
      return info;
    },
    [s](info_atom, std::string& id) {
      s->calls.push_back("info " + id);
      sandbox_info info;
      info.id = id;
      info.state = sandbox_state::running;
      return info;
    },
    [s](destroy_atom, std::string& id) {
      s->calls.push_back("destroy " + id);
      return true;
    },
    [s](exec_atom, std::string& id, exec_request&, uint64_t token) {
      s->calls.push_back("exec " + id + " " + std::to_string(token));
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
      info.id = "n-a.s1";
      return std::vector<sandbox_info>{info};
    },
    [s](job_atom, label_map&, bool pause) {
      s->calls.push_back(pause ? "pause job" : "resume job");
      job_result r;
      r.done = {"n-a.s1"};
      return r;
    },
    [s](status_atom) {
      s->calls.push_back("status");
      node_status ns;
      ns.node_id = "n-a";
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

TEST_CASE_METHOD(fixture, "a sandbox whose owner died is lost: info says so, destroy is a no-op",
                 "[actor][placement]") {
  view({{"n-b", "dead"}});
  auto info = ask<sandbox_info>(info_atom::value, std::string{"n-b.s9"});
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::lost);
  CHECK(info->node == "n-b");
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
