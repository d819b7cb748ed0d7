// Placement actor implementation (see placement.hpp): routing by owner,
// the create walk over candidates, the cluster-wide list and job. The rows of
// the operations in actors/operations.hpp are generated (forward_row); the
// few that differ (create, info, destroy, cancel) are written out here.
#include "actors/placement.hpp"

#include <algorithm>
#include <tuple>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/job_ops.hpp"
#include "actors/sandbox_replay.hpp"
#include "core/egress_sources.hpp"
#include "core/clock.hpp"
#include "core/host_port.hpp"
#include "core/ids.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/session_inspect.hpp" // shell sessions (issue 26 part 2)
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "policy/request_owner.hpp" // issue 28: one owner per request_id

namespace dsec {

namespace {

using namespace std::chrono_literals;

// Bounds of the calls between nodes (core/clock.hpp, the peer hop).
constexpr auto peer_timeout = call_wait(hop::peer);
constexpr auto connect_timeout = connect_wait;
constexpr auto list_timeout = list_wait(hop::peer);

const std::string& self_id(placement_actor_ptr self) { return self->state.ctx->config.node_id; }

const member_info* find_member(placement_actor_ptr self, const std::string& id) {
  for (auto& m : self->state.view)
    if (m.id == id)
      return &m;
  return nullptr;
}

// -- peers ----------------------------------------------------------------------

/// Sends `(xs...)` to `node`'s placement actor and hands its T answer (or
/// error) to `done`. Fails at once if the peer's connection drops meanwhile.
template <class T, class... Ts>
void ask_peer(placement_actor_ptr self, const std::string& node, caf::duration timeout,
              std::function<void(expected<T>)> done, Ts... xs) {
  auto* m = find_member(self, node);
  if (!m)
    return done(not_found("node " + node + " is not a member of this cluster"));
  // Watched while it waits (actors/peer_watch.hpp): a cut gossip cannot see
  // fails it within 2 s instead of at its deadline.
  auto& st = self->state;
  auto ticket = st.watch.begin(node);
  auto finish = [self, node, ticket, done = std::move(done)](expected<T> r) {
    self->state.watch.end(node, ticket);
    done(std::move(r));
  };
  st.watch.watch(self, st.peers, node, m->address);
  st.peers.template ask<T>(self, node, m->address, connect_timeout, timeout,
                           std::function<void(expected<T>)>{std::move(finish)},
                           std::move(xs)...);
}

/// Forwards a call about one sandbox to its remote owner; the answer goes to
/// the original requester.
template <class T, class... Ts>
caf::result<T> forward(placement_actor_ptr self, const std::string& node, caf::duration timeout,
                       Ts... xs) {
  auto rp = self->make_response_promise();
  ask_peer<T>(
    self, node, timeout,
    [rp](expected<T> r) mutable {
      if (r)
        rp.deliver(std::move(*r));
      else
        rp.deliver(to_caf(r.err()));
    },
    std::move(xs)...);
  return rp;
}

// -- routing by owner --------------------------------------------------------------

/// Where a call about sandbox `id` goes.
struct route {
  enum { local, remote, lost, bad, unreachable } kind;
  std::string node;
  error err;
};

route route_of(placement_actor_ptr self, const std::string& id) {
  if (!valid_sandbox_id(id))
    return {route::bad, "",
            invalid_argument("sandbox id \"" + id.substr(0, 80)
                             + "\" is malformed (expected <node>.<unique>)")};
  auto node = std::string{owner_of(id)};
  if (node == self_id(self))
    return {route::local, node, {}};
  auto* m = find_member(self, node);
  if (!m)
    return {route::bad, node,
            not_found("sandbox " + id + " not found: node " + node
                      + " is not a member of this cluster")};
  if (m->state == "dead" || m->state == "left")
    return {route::lost, node,
            unavailable("sandbox " + id + " is lost: its node " + node + " is " + m->state
                        + (m->state == "dead" ? " (unreachable: crashed, or cut off by a"
                                                " partition)"
                                              : ""))};
  // A suspect misses gossip probes: fail now, retryably, rather than wait
  // for an answer that may never come (issue 28: within 2 s, naming it).
  if (m->state == "suspect")
    return {route::unreachable, node,
            unavailable("sandbox " + id + ": its node " + node
                        + " is unreachable (it misses gossip probes: stalled or cut off by a"
                          " partition); retry")};
  return {route::remote, node, {}};
}

/// Routes a call about sandbox `id`: `(xs...)` goes to the local lifecycle
/// or to the owner's placement actor.
template <class T, class... Ts>
caf::result<T> routed(placement_actor_ptr self, const std::string& id, caf::duration timeout,
                      Ts... xs) {
  auto r = route_of(self, id);
  switch (r.kind) {
    case route::local: return self->delegate(self->state.lifecycle, std::move(xs)...);
    case route::remote: return forward<T>(self, r.node, timeout, std::move(xs)...);
    default: return to_caf(r.err);
  }
}

/// Placement's row of a forwarded operation (actors/operations.hpp): the
/// op's stamp, then the call goes to the owner (the local lifecycle or the
/// owner's placement) with the op's peer deadline.
template <class Op, class Args = typename Op::args>
struct forward_row;

template <class Op, class... Args>
struct forward_row<Op, ops::type_list<Args...>> {
  using reply = typename Op::reply;
  placement_actor_ptr self;

  caf::result<reply> operator()(typename Op::atom, std::string& id, Args&... xs) const {
    Op::at_front(xs...);
    auto wait = Op::deadline(ops::waits_of(hop::peer), xs...);
    auto bound = wait ? caf::duration{*wait} : caf::infinite;
    return routed<reply>(self, id, bound, Op::atom::value, id, std::move(xs)...);
  }
};

template <class... Ops>
auto forward_rows(placement_actor_ptr self, ops::type_list<Ops...>) {
  return std::make_tuple(forward_row<Ops>{self}...);
}

// -- create ---------------------------------------------------------------------

/// One create walking its candidate list.
struct create_walk {
  sandbox_spec spec;
  std::vector<std::string> order;
  size_t next = 0;
  caf::response_promise rp;
  error last;
};
using walk_ptr = std::shared_ptr<create_walk>;

/// Refusals that move a create on to the next candidate.
bool refused(const error& e) {
  return e.code == errc::resource_exhausted || e.code == errc::unavailable
         || e.code == errc::timeout;
}

void try_next(placement_actor_ptr self, walk_ptr w) {
  if (w->next >= w->order.size()) {
    if (!w->last)
      w->last = resource_exhausted("create: no node of the cluster can take the sandbox");
    else if (w->order.size() > 1)
      w->last.message = "create: all " + std::to_string(w->order.size())
                        + " candidate nodes refused; last: " + w->last.message;
    return w->rp.deliver(to_caf(w->last));
  }
  auto target = w->order[w->next++];
  auto spec = w->spec;
  spec.node = target; // pinned: the target serves it or refuses, never forwards
  self->state.placed.sent(target);
  auto done = [self, w](expected<sandbox_info> r) {
    if (r)
      return w->rp.deliver(std::move(*r));
    if (!refused(r.err()))
      return w->rp.deliver(to_caf(r.err()));
    w->last = r.err();
    try_next(self, w);
  };
  if (target == self_id(self)) {
    self->request(self->state.lifecycle, caf::duration{peer_timeout}, create_atom::value,
                  std::move(spec))
      .then([done](sandbox_info& i) { done(std::move(i)); },
            [done](caf::error& e) { done(from_caf(e)); });
    return;
  }
  ask_peer<sandbox_info>(self, target, caf::duration{peer_timeout}, done, create_atom::value,
                         std::move(spec));
}

caf::result<sandbox_info> handle_create(placement_actor_ptr self, sandbox_spec& spec) {
  auto& st = self->state;
  if (!spec.node.empty()) {
    if (spec.node == self_id(self))
      return self->delegate(st.lifecycle, create_atom::value, std::move(spec));
    auto* m = find_member(self, spec.node);
    if (!m || m->state != "alive")
      return to_caf(not_found("create: node \"" + spec.node + "\" is not "
                              + (m ? "alive (it is " + m->state + ")" : "a member of this cluster")));
    auto target = spec.node; // copied: `spec` moves into the message
    return forward<sandbox_info>(self, target, caf::duration{peer_timeout}, create_atom::value,
                                 std::move(spec));
  }
  if (st.view.size() <= 1) // alone (or no view yet): serve locally
    return self->delegate(st.lifecycle, create_atom::value, std::move(spec));
  auto w = std::make_shared<create_walk>();
  if (!spec.request_id.empty()) {
    // Only the key's owner may create it (policy/request_owner.hpp).
    auto* owner = placement::request_owner(st.view, spec.request_id);
    if (!owner)
      return to_caf(resource_exhausted("create: no node of the cluster accepts sandboxes now"));
    auto why = placement::owner_unreachable(*owner, spec.request_id);
    if (!why.empty())
      return to_caf(unavailable(why));
    w->order = {owner->id};
  } else {
    w->order = placement::place(st.view, self_id(self), spec, st.placed, st.policy, st.ring,
                                st.rng);
  }
  if (w->order.empty())
    return to_caf(resource_exhausted("create: no node of the cluster accepts sandboxes now"));
  if (w->order.size() > st.policy.max_attempts)
    w->order.resize(st.policy.max_attempts);
  w->spec = std::move(spec);
  w->rp = self->make_response_promise();
  try_next(self, w);
  return w->rp;
}

// -- cluster-wide list -------------------------------------------------------------

caf::result<std::vector<sandbox_info>> handle_list(placement_actor_ptr self,
                                                   const label_map& labels) {
  struct gather {
    caf::response_promise rp;
    std::vector<sandbox_info> out;
    size_t left = 0;
  };
  auto g = std::make_shared<gather>();
  g->rp = self->make_response_promise();
  auto add = [g](std::vector<sandbox_info> xs) {
    g->out.insert(g->out.end(), std::make_move_iterator(xs.begin()),
                  std::make_move_iterator(xs.end()));
    if (--g->left > 0)
      return;
    std::sort(g->out.begin(), g->out.end(), [](auto& a, auto& b) {
      return a.created_at_ms < b.created_at_ms || (a.created_at_ms == b.created_at_ms && a.id < b.id);
    });
    g->rp.deliver(std::move(g->out));
  };
  std::vector<std::string> peers;
  for (auto& m : self->state.view)
    if (m.id != self_id(self) && (m.state == "alive" || m.state == "suspect"))
      peers.push_back(m.id);
  g->left = 1 + peers.size();
  self->request(self->state.lifecycle, caf::duration{list_timeout}, list_atom::value, labels)
    .then([add](std::vector<sandbox_info>& xs) { add(std::move(xs)); },
          [add](caf::error&) { add({}); });
  // A peer that does not answer in time is left out rather than failing the list.
  for (auto& p : peers)
    ask_peer<std::vector<sandbox_info>>(
      self, p, caf::duration{list_timeout},
      [add](expected<std::vector<sandbox_info>> r) {
        add(r ? std::move(*r) : std::vector<sandbox_info>{});
      },
      list_atom::value, labels, true);
  return g->rp;
}

/// The view as answered to callers: self first, then by id.
std::vector<member_info> nodes_view(placement_actor_ptr self) {
  auto out = self->state.view;
  if (out.empty()) {
    member_info me;
    me.id = self_id(self);
    me.address = self->state.ctx->config.listen;
    me.state = "alive";
    out.push_back(me);
  }
  std::sort(out.begin(), out.end(), [self](auto& a, auto& b) {
    bool sa = a.id == self_id(self), sb = b.id == self_id(self);
    return sa != sb ? sa : a.id < b.id;
  });
  return out;
}

/// Why calls to `node` failed when gossip holds it `state`.
std::string unreachable_text(const std::string& node, const std::string& state) {
  if (state == "left")
    return "node " + node + " left the cluster";
  // Said of calls already sent: they may still run there once it is reached
  // again (TCP delivers what it holds after a heal), so a retry must be safe
  // to repeat (request_id for creates; delete is idempotent).
  return "node " + node + " is unreachable (" + state
         + " in this node's view: crashed, stalled or cut off by a partition); retry (a call"
           " already sent may still complete there)";
}

// A suspect's calls in flight get this long to be answered (a false suspicion
// under loss is refuted within a probe round or two) before they fail; with
// suspicion itself under a second on a LAN, calls end within 2 s (issue 28).
// Longer waits out more refutations but holds callers of a cut-off node.
constexpr auto suspect_grace = std::chrono::milliseconds{500};

/// Fails the calls to `node` after suspect_grace if it is still suspect.
void fail_if_still_suspect(placement_actor_ptr self, const std::string& node) {
  if (!self->state.suspect_checks.insert(node).second)
    return; // one check at a time per node
  auto check = [self, node] {
    self->state.suspect_checks.erase(node);
    auto* m = find_member(self, node);
    if (m && m->state == "suspect")
      self->state.peers.drop(node, unavailable(unreachable_text(node, "suspect")));
  };
  self->delayed_send(self, suspect_grace, cont_atom::value,
                     continuation{std::move(check)});
}

void on_view(placement_actor_ptr self, std::vector<member_info>& view) {
  auto& st = self->state;
  // A node's fresh report already counts the creates we sent it.
  st.placed.on_view(st.view, view);
  st.view = std::move(view);
  // Links to members that died or left fail their calls now, not at TCP timeout.
  for (auto& id : st.peers.nodes()) {
    auto* m = find_member(self, id);
    if (!m || m->state == "dead" || m->state == "left")
      st.peers.drop(id, unavailable(unreachable_text(id, m ? m->state : "gone")));
    else if (m->state == "suspect")
      fail_if_still_suspect(self, id);
  }
}

} // namespace

// What the trajectory calls need (placement_trajectory.cpp).
std::string live_owner(placement_actor_ptr self, const std::string& id) {
  auto r = route_of(self, id);
  return r.kind == route::remote ? r.node : std::string{};
}

void ask_trajectory(placement_actor_ptr self, const std::string& node, const std::string& id,
                    int64_t since, std::function<void(expected<std::string>)> done) {
  ask_peer<std::string>(self, node, caf::duration{peer_timeout}, std::move(done),
                        traj_atom::value, id, since);
}

void ask_replay(placement_actor_ptr self, const std::string& node, const std::string& id,
                int64_t upto, caf::duration timeout,
                std::function<void(expected<sandbox_info>)> done) {
  ask_peer<sandbox_info>(self, node, timeout, std::move(done), replay_atom::value, id, upto);
}

namespace {

/// info and destroy of a sandbox whose node is gone are answered, not
/// failed; cancel is fire-and-forget.
auto sandbox_rows(placement_actor_ptr self) {
  auto timeout = caf::duration{peer_timeout};
  return std::make_tuple(
    [self](create_atom, sandbox_spec& spec) { return handle_create(self, spec); },
    [self, timeout](info_atom, std::string& id) -> caf::result<sandbox_info> {
      auto r = route_of(self, id);
      if (r.kind == route::lost) { // answered, not failed: the caller sees `lost`
        sandbox_info info;
        info.id = id;
        info.node = r.node;
        info.state = sandbox_state::lost;
        info.reason = "node " + r.node + " is gone";
        return info;
      }
      return routed<sandbox_info>(self, id, timeout, info_atom::value, id);
    },
    [self, timeout](destroy_atom, std::string& id) -> caf::result<bool> {
      auto r = route_of(self, id);
      if (r.kind == route::lost) {
        // A dead node may be alive behind a partition and bring the sandbox
        // back at the heal: "deleted: false" would be a lie the caller acts
        // on (issue 28). Retryable 503 until it is back or forgotten.
        auto* m = find_member(self, r.node);
        if (m && m->state == "dead")
          return to_caf(r.err);
        return false; // idempotent: it left with its node
      }
      return routed<bool>(self, id, timeout, destroy_atom::value, id);
    },
    [self](cancel_atom, const std::string& id, uint64_t token) {
      auto r = route_of(self, id);
      if (r.kind == route::local) {
        self->send(self->state.lifecycle, cancel_atom::value, id, token);
        return;
      }
      if (r.kind != route::remote)
        return;
      auto* m = find_member(self, r.node);
      self->state.peers.with(self, r.node, m ? m->address : std::string{}, connect_timeout,
                             [self, id, token](const placement_actor& peer, const error&) {
                               if (peer)
                                 self->send(peer, cancel_atom::value, id, token);
                             });
    },
    // Trajectory log (actors/sandbox_replay.hpp): served by a live owner,
    // else from this node's --trajectory-dir (shared in a cluster).
    [self](traj_atom, std::string& id, int64_t since) {
      return placement_trajectory(self, id, since);
    },
    [self](replay_atom, std::string& id, int64_t upto) { return placement_replay(self, id, upto); });
}

/// The rows about the cluster: lists, jobs, the view.
auto cluster_rows(placement_actor_ptr self) {
  return std::make_tuple(
    [self](list_atom, const label_map& labels) { return handle_list(self, labels); },
    // A peer's part of a cluster-wide list: this node's own sandboxes.
    [self](list_atom, label_map& labels, bool) {
      return self->delegate(self->state.lifecycle, list_atom::value, std::move(labels));
    },
    // Job-level pause/resume, cluster-wide (actors/job_ops.hpp); a peer's
    // part is its own sandboxes.
    [self](job_atom, const label_map& labels, bool pause) {
      return run_job_cluster(self, labels, pause,
                             [self, labels, pause](const std::string& node,
                                                   std::function<void(expected<job_result>)> done) {
                               ask_peer<job_result>(self, node, caf::duration{job_wait(hop::peer)},
                                                    std::move(done), job_atom::value, labels,
                                                    pause, true);
                             });
    },
    [self](job_atom, label_map& labels, bool pause, bool) {
      return self->delegate(self->state.lifecycle, job_atom::value, std::move(labels), pause);
    },
    // The view, with this node's own entry fresh from the lifecycle (gossip
    // reports are up to a second old).
    [self](nodes_atom) -> caf::result<std::vector<member_info>> {
      auto rp = self->make_response_promise();
      self->request(self->state.lifecycle, caf::duration{list_timeout}, status_atom::value)
        .then(
          [self, rp](node_status& ns) mutable {
            auto view = nodes_view(self);
            view.front().sandboxes = ns.sandboxes;
            view.front().creating = ns.creating;
            view.front().layers = ns.layers;
            // As gossip carries it (gossip_actor.cpp publish_load, issue 29).
            view.front().layers.insert(view.front().layers.begin(),
                                       "egress-sources:"
                                         + net::installed_egress_sources().digest);
            rp.deliver(std::move(view));
          },
          [self, rp](caf::error&) mutable { rp.deliver(nodes_view(self)); });
      return rp;
    },
    // INTERNAL: from the gossip actor, on every change of the view.
    [self](view_atom, std::vector<member_info>& view) { on_view(self, view); });
}

/// The rows this node serves itself: its layers, metrics and status, FnCall,
/// and image fetch for peers.
auto node_rows(placement_actor_ptr self) {
  return std::make_tuple(
    [](cont_atom, continuation& c) { c.fn(); }, // INTERNAL: their disk reads' results
    [self](layers_atom) { return self->delegate(self->state.lifecycle, layers_atom::value); },
    [self](metrics_atom) { return self->delegate(self->state.lifecycle, metrics_atom::value); },
    [self](status_atom) { return self->delegate(self->state.lifecycle, status_atom::value); },
    // FnCall (actors/fncall.hpp): served by this node's warm pool.
    [self](fncall_atom, fncall_request& req) -> caf::result<exec_result> {
      if (!self->state.fncall)
        return to_caf(unavailable("node " + self_id(self) + ": fncall is not running"));
      return self->delegate(self->state.fncall, fncall_atom::value, std::move(req));
    },
    // Image fetch from peers (actors/image_fetch.hpp): what this node holds
    // of `ref`, and part of an image, both served by the image-fetch actor.
    [self](fetch_atom, std::string& ref) -> caf::result<layer_info> {
      if (!self->state.fetch)
        return to_caf(unavailable("node " + self_id(self) + ": image fetch is not running"));
      return self->delegate(self->state.fetch, info_atom::value, std::move(ref));
    },
    [self](blob_atom, std::string& digest, uint64_t offset,
           uint32_t len) -> caf::result<std::string> {
      if (!self->state.fetch)
        return to_caf(unavailable("node " + self_id(self) + ": image fetch is not running"));
      return self->delegate(self->state.fetch, blob_atom::value, std::move(digest), offset, len);
    });
}

} // namespace

placement_actor::behavior_type placement_behavior(placement_actor_ptr self, node_context_ptr ctx,
                                                  lifecycle_actor lifecycle,
                                                  image_fetch_actor fetch, fncall_actor fncall) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.lifecycle = std::move(lifecycle);
  st.fetch = std::move(fetch);
  st.fncall = std::move(fncall);
  self->set_down_handler([self](caf::down_msg& dm) {
    self->state.peers.on_down(dm.source, self->home_system().render(dm.reason));
  });
  auto rows = std::tuple_cat(sandbox_rows(self), cluster_rows(self), node_rows(self),
                             forward_rows(self, ops::forwarded_ops{}));
  return std::apply(
    [](auto&... row) { return placement_actor::behavior_type{std::move(row)...}; }, rows);
}

} // namespace dsec
