// Placement actor implementation (see placement.hpp).
#include "actors/placement.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/image_fetch.hpp"
#include "actors/interfaces.hpp"
#include "actors/job_ops.hpp"
#include "actors/sandbox_replay.hpp"
#include "core/clock.hpp"
#include "core/host_port.hpp"
#include "core/ids.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"

namespace dsec {

namespace {

using lbl_map = std::map<std::string, std::string>;
using namespace std::chrono_literals;

/// Bound on calls between nodes that are not execs (a create waits for the
/// remote backend; generous, since a dead peer fails calls at once anyway).
constexpr auto peer_timeout = std::chrono::seconds(120);
/// Bound on connecting to a peer and on each peer's part of a cluster list.
constexpr auto connect_timeout = std::chrono::seconds(5);
constexpr auto list_timeout = std::chrono::seconds(5);

const std::string& self_id(placement_actor_ptr self) { return self->state.ctx->config.node_id; }

const member_info* find_member(placement_actor_ptr self, const std::string& id) {
  for (auto& m : self->state.view)
    if (m.id == id)
      return &m;
  return nullptr;
}

// -- peer links ------------------------------------------------------------------

/// Fails everything queued on or in flight to `node` and forgets its link.
void drop_peer(placement_actor_ptr self, const std::string& node, const error& err) {
  auto it = self->state.peers.find(node);
  if (it == self->state.peers.end())
    return;
  auto link = std::move(it->second);
  self->state.peers.erase(it);
  for (auto& w : link.waiting)
    w(caf::actor{}, err);
  for (auto& [ticket, fail] : link.inflight)
    fail(err);
}

/// Runs `f(handle, error)` once `node`'s placement actor is connected.
void with_peer(placement_actor_ptr self, const std::string& node,
               std::function<void(const caf::actor&, const error&)> f) {
  auto* m = find_member(self, node);
  if (!m)
    return f({}, not_found("node " + node + " is not a member of this cluster"));
  auto& link = self->state.peers[node];
  if (link.handle)
    return f(link.handle, {});
  link.waiting.push_back(std::move(f));
  if (link.connecting)
    return;
  link.connecting = true;
  auto hp = parse_host_port(m->address, false);
  if (!hp)
    return drop_peer(self, node, unavailable("node " + node + ": bad address " + m->address));
  auto mm = self->home_system().middleman().actor_handle();
  self->request(mm, caf::duration{connect_timeout}, caf::connect_atom::value, hp->first,
                hp->second)
    .then(
      [self, node](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        auto it = self->state.peers.find(node);
        if (it == self->state.peers.end())
          return;
        if (!ptr)
          return drop_peer(self, node, unavailable("node " + node + " publishes no actor"));
        auto& link = it->second;
        link.connecting = false;
        link.handle = caf::actor_cast<caf::actor>(std::move(ptr));
        self->monitor(link.handle);
        auto waiting = std::move(link.waiting);
        link.waiting.clear();
        for (auto& w : waiting)
          w(link.handle, {});
      },
      [self, node](caf::error& err) {
        drop_peer(self, node, unavailable("connect to node " + node + ": "
                                          + self->home_system().render(err)));
      });
}

/// Sends `msg` to `node`'s placement actor and hands its T answer (or error)
/// to `done`. Fails at once if the peer's connection drops meanwhile.
template <class T>
void ask_peer(placement_actor_ptr self, const std::string& node, caf::message msg,
              caf::duration timeout, std::function<void(expected<T>)> done) {
  with_peer(self, node, [self, node, msg = std::move(msg), timeout,
                         done](const caf::actor& peer, const error& err) mutable {
    if (!peer)
      return done(err);
    auto ticket = ++self->state.next_ticket;
    self->state.peers[node].inflight[ticket] = [done](const error& e) { done(e); };
    auto settle = [self, node, ticket] {
      auto it = self->state.peers.find(node);
      return it != self->state.peers.end() && it->second.inflight.erase(ticket) > 0;
    };
    self->request(peer, timeout, std::move(msg))
      .then([done, settle](T& x) { if (settle()) done(std::move(x)); },
            [done, settle](caf::error& e) { if (settle()) done(from_caf(e)); });
  });
}

/// Forwards a call about one sandbox to its remote owner; the answer goes to
/// the original requester.
template <class T>
caf::result<caf::message> forward(placement_actor_ptr self, const std::string& node,
                                  caf::message msg, caf::duration timeout) {
  auto rp = self->make_response_promise();
  ask_peer<T>(self, node, std::move(msg), timeout, [rp](expected<T> r) mutable {
    if (r)
      rp.deliver(std::move(*r));
    else
      rp.deliver(to_caf(r.err()));
  });
  return rp;
}

// -- routing by owner --------------------------------------------------------------

/// Where a call about sandbox `id` goes.
struct route {
  enum { local, remote, lost, bad } kind;
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
            unavailable("sandbox " + id + " is lost: its node " + node + " is " + m->state)};
  return {route::remote, node, {}};
}

/// Routes a call about sandbox `id`: `msg` goes to the local lifecycle or to
/// the owner's placement actor.
template <class T>
caf::result<caf::message> routed(placement_actor_ptr self, const std::string& id,
                                 caf::message msg, caf::duration timeout) {
  auto r = route_of(self, id);
  switch (r.kind) {
    case route::local: return self->delegate(self->state.lifecycle, std::move(msg));
    case route::remote: return forward<T>(self, r.node, std::move(msg), timeout);
    default: return to_caf(r.err);
  }
}

/// Stamps an exec that this node serves with the time its front door took it.
void stamp(exec_request& req) {
  req.received_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
}

/// Bound on an exec that runs on a peer (layers of slack: core/clock.hpp).
caf::duration exec_timeout(const exec_request& req) {
  auto wait = exec_wait(req.timeout_s, exec_slack_inner);
  return wait ? caf::duration{*wait} : caf::infinite;
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
  ++self->state.placed[target];
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
  ask_peer<sandbox_info>(self, target, caf::make_message(create_atom::value, std::move(spec)),
                         caf::duration{peer_timeout}, done);
}

caf::result<caf::message> handle_create(placement_actor_ptr self, sandbox_spec& spec) {
  auto& st = self->state;
  if (!spec.node.empty()) {
    if (spec.node == self_id(self))
      return self->delegate(st.lifecycle, create_atom::value, std::move(spec));
    auto* m = find_member(self, spec.node);
    if (!m || m->state != "alive")
      return to_caf(not_found("create: node \"" + spec.node + "\" is not "
                              + (m ? "alive (it is " + m->state + ")" : "a member of this cluster")));
    auto target = spec.node; // copied: `spec` moves into the message
    return forward<sandbox_info>(self, target,
                                 caf::make_message(create_atom::value, std::move(spec)),
                                 caf::duration{peer_timeout});
  }
  if (st.view.size() <= 1) // alone (or no view yet): serve locally
    return self->delegate(st.lifecycle, create_atom::value, std::move(spec));
  auto w = std::make_shared<create_walk>();
  w->order = spec.request_id.empty()
               ? placement::plan(st.view, self_id(self), spec, st.placed, st.policy, st.rng)
               : placement::rendezvous(st.view, spec.request_id);
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

caf::result<caf::message> handle_list(placement_actor_ptr self, const lbl_map& labels) {
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
      self, p, caf::make_message(list_atom::value, labels, true), caf::duration{list_timeout},
      [add](expected<std::vector<sandbox_info>> r) { add(r ? std::move(*r) : std::vector<sandbox_info>{}); });
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

void on_view(placement_actor_ptr self, std::vector<member_info>& view) {
  auto& st = self->state;
  // A node's fresh report already counts the creates we sent it.
  for (auto& m : view) {
    auto* old = find_member(self, m.id);
    if (!old || old->sandboxes != m.sandboxes || old->creating != m.creating)
      st.placed.erase(m.id);
  }
  st.view = std::move(view);
  // Links to members that died or left fail their calls now, not at TCP timeout.
  std::vector<std::string> gone;
  for (auto& [id, link] : st.peers) {
    auto* m = find_member(self, id);
    if (!m || m->state == "dead" || m->state == "left")
      gone.push_back(id);
  }
  for (auto& id : gone)
    drop_peer(self, id, unavailable("node " + id + " left the cluster or died"));
}

} // namespace

// What the trajectory calls need (placement_trajectory.cpp).
std::string live_owner(placement_actor_ptr self, const std::string& id) {
  auto r = route_of(self, id);
  return r.kind == route::remote ? r.node : std::string{};
}

void ask_text(placement_actor_ptr self, const std::string& node, caf::message msg,
              std::function<void(expected<std::string>)> done) {
  ask_peer<std::string>(self, node, std::move(msg), caf::duration{peer_timeout}, std::move(done));
}

void ask_sandbox(placement_actor_ptr self, const std::string& node, caf::message msg,
                 caf::duration timeout, std::function<void(expected<sandbox_info>)> done) {
  ask_peer<sandbox_info>(self, node, std::move(msg), timeout, std::move(done));
}

caf::behavior placement_actor(placement_actor_ptr self, node_context_ptr ctx,
                              caf::actor lifecycle) {
  self->state.ctx = std::move(ctx);
  self->state.lifecycle = std::move(lifecycle);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& [id, link] : self->state.peers)
      if (link.handle && link.handle.address() == dm.source) {
        auto node = id;
        drop_peer(self, node, unavailable("node " + node + " went away ("
                                          + self->home_system().render(dm.reason) + ")"));
        return;
      }
  });
  return {
    [self](create_atom, sandbox_spec& spec) { return handle_create(self, spec); },
    [self](info_atom, std::string& id) -> caf::result<caf::message> {
      auto r = route_of(self, id);
      if (r.kind == route::lost) { // answered, not failed: the caller sees `lost`
        sandbox_info info;
        info.id = id;
        info.node = r.node;
        info.state = sandbox_state::lost;
        info.reason = "node " + r.node + " is gone";
        return caf::make_message(std::move(info));
      }
      return routed<sandbox_info>(self, id, caf::make_message(info_atom::value, id),
                                  caf::duration{peer_timeout});
    },
    [self](list_atom, const lbl_map& labels) { return handle_list(self, labels); },
    // A peer's part of a cluster-wide list: this node's own sandboxes.
    [self](list_atom, lbl_map& labels, bool) -> caf::result<caf::message> {
      return self->delegate(self->state.lifecycle, list_atom::value, std::move(labels));
    },
    // Job-level pause/resume, cluster-wide (actors/job_ops.hpp); a peer's
    // part is its own sandboxes.
    [self](job_atom, const lbl_map& labels, bool pause) {
      return run_job_cluster(self, labels, pause,
                             [self](const std::string& node, caf::message msg,
                                    std::function<void(expected<job_result>)> done) {
                               ask_peer<job_result>(self, node, std::move(msg),
                                                    caf::duration{peer_timeout + 30s},
                                                    std::move(done));
                             });
    },
    [self](job_atom, lbl_map& labels, bool pause, bool) -> caf::result<caf::message> {
      return self->delegate(self->state.lifecycle, job_atom::value, std::move(labels), pause);
    },
    [self](destroy_atom, std::string& id) -> caf::result<caf::message> {
      if (route_of(self, id).kind == route::lost)
        return caf::make_message(false); // idempotent: it is gone with its node
      return routed<bool>(self, id, caf::make_message(destroy_atom::value, id),
                          caf::duration{peer_timeout});
    },
    [self](exec_atom, std::string& id, exec_request& req,
           uint64_t token) -> caf::result<caf::message> {
      stamp(req); // a forwarded exec is stamped again by its owner
      auto timeout = exec_timeout(req);
      return routed<exec_result>(self, id,
                                 caf::make_message(exec_atom::value, id, std::move(req), token),
                                 timeout);
    },
    [self](stream_atom, std::string& id, exec_request& req, caf::actor& sink,
           uint64_t token) -> caf::result<caf::message> {
      stamp(req);
      auto timeout = exec_timeout(req);
      return routed<exec_result>(
        self, id, caf::make_message(stream_atom::value, id, std::move(req), sink, token), timeout);
    },
    // The gateway's in-process sink cannot cross nodes: a local relay actor
    // takes the remote chunks and feeds the sink.
    [self](stream_atom, std::string& id, exec_request& req, chunk_sink& sink,
           uint64_t token) -> caf::result<caf::message> {
      stamp(req);
      auto r = route_of(self, id);
      if (r.kind != route::remote)
        return routed<exec_result>(
          self, id, caf::make_message(stream_atom::value, id, std::move(req), std::move(sink), token),
          exec_timeout(req));
      // The owner sends the chunks to the relay and the result to us over one
      // connection, so the chunks are in the relay's mailbox before the
      // result reaches us: a shutdown request queued behind them answers once
      // the relay has fed them all to the sink (an exit message would jump
      // the queue and drop the last chunks).
      auto relay = self->spawn([fn = std::move(sink.fn)](caf::event_based_actor* relay_self)
                                 -> caf::behavior {
        return {[fn](stream_atom, uint64_t, exec_chunk& c) { fn(std::move(c)); },
                [relay_self](shutdown_atom) {
                  relay_self->quit();
                  return true;
                }};
      });
      auto rp = self->make_response_promise();
      auto timeout = exec_timeout(req);
      ask_peer<exec_result>(
        self, r.node, caf::make_message(stream_atom::value, id, std::move(req), relay, token),
        timeout, [self, rp, relay](expected<exec_result> res) mutable {
          auto out = std::make_shared<expected<exec_result>>(std::move(res));
          auto deliver = [rp, out]() mutable {
            if (*out)
              rp.deliver(std::move(**out));
            else
              rp.deliver(to_caf(out->err()));
          };
          self->request(relay, std::chrono::seconds(10), shutdown_atom::value)
            .then([deliver](bool) mutable { deliver(); },
                  [deliver, relay](caf::error&) mutable {
                    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
                    deliver();
                  });
        });
      return rp;
    },
    [self](bgexec_atom, std::string& id, exec_request& req) -> caf::result<caf::message> {
      stamp(req);
      return routed<background_process>(self, id,
                                         caf::make_message(bgexec_atom::value, id, std::move(req)),
                                         caf::duration{peer_timeout});
    },
    [self](bgexec_atom, std::string& id, exec_request& req,
           bool keep_stdin) -> caf::result<caf::message> {
      stamp(req);
      return routed<background_process>(
        self, id, caf::make_message(bgexec_atom::value, id, std::move(req), keep_stdin),
        caf::duration{peer_timeout});
    },
    [self](stdin_atom, std::string& id, int32_t pid, std::string& data,
           bool close) -> caf::result<caf::message> {
      return routed<bool>(self, id,
                          caf::make_message(stdin_atom::value, id, pid, std::move(data), close),
                          caf::duration{peer_timeout});
    },
    [self](procs_atom, std::string& id) -> caf::result<caf::message> {
      return routed<std::vector<process_info>>(self, id, caf::make_message(procs_atom::value, id),
                                               caf::duration{peer_timeout});
    },
    // A wait is answered after up to wait_ms: the route waits that long too.
    [self](proc_atom, std::string& id, int32_t pid, int64_t wait_ms) -> caf::result<caf::message> {
      auto bound = caf::duration{peer_timeout + std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0))};
      return routed<background_process>(self, id,
                                         caf::make_message(proc_atom::value, id, pid, wait_ms),
                                         bound);
    },
    [self](signal_atom, std::string& id, int32_t pid, int32_t signo,
           bool group) -> caf::result<caf::message> {
      return routed<bool>(self, id, caf::make_message(signal_atom::value, id, pid, signo, group),
                          caf::duration{peer_timeout});
    },
    [self](cancel_atom, const std::string& id, uint64_t token) {
      auto r = route_of(self, id);
      if (r.kind == route::local)
        self->send(self->state.lifecycle, cancel_atom::value, id, token);
      else if (r.kind == route::remote)
        with_peer(self, r.node, [self, id, token](const caf::actor& peer, const error&) {
          if (peer)
            self->send(peer, cancel_atom::value, id, token);
        });
    },
    [self](wfile_atom, std::string& id, std::string& path,
           std::string& data) -> caf::result<caf::message> {
      return routed<bool>(self, id,
                          caf::make_message(wfile_atom::value, id, std::move(path), std::move(data)),
                          caf::duration{peer_timeout});
    },
    [self](rfile_atom, std::string& id, std::string& path,
           uint64_t max_bytes) -> caf::result<caf::message> {
      return routed<std::string>(self, id,
                                 caf::make_message(rfile_atom::value, id, std::move(path), max_bytes),
                                 caf::duration{peer_timeout});
    },
    [self](fsop_atom, std::string& id, std::string& op, std::string& path, std::string& to,
           int32_t depth) -> caf::result<caf::message> {
      return routed<std::vector<fs_entry>>(
        self, id,
        caf::make_message(fsop_atom::value, id, std::move(op), std::move(path), std::move(to),
                          depth),
        caf::duration{peer_timeout});
    },
    [self](setttl_atom, std::string& id, int64_t ttl_s) -> caf::result<caf::message> {
      return routed<sandbox_info>(self, id, caf::make_message(setttl_atom::value, id, ttl_s),
                                  caf::duration{peer_timeout});
    },
    [self](pause_atom, std::string& id) -> caf::result<caf::message> {
      return routed<sandbox_info>(self, id, caf::make_message(pause_atom::value, id),
                                  caf::duration{peer_timeout});
    },
    [self](resume_atom, std::string& id) -> caf::result<caf::message> {
      return routed<sandbox_info>(self, id, caf::make_message(resume_atom::value, id),
                                  caf::duration{peer_timeout});
    },
    [self](snapshot_atom, std::string& id, std::string& name,
           std::string& version) -> caf::result<caf::message> {
      return routed<snapshot_info>(self, id,
                                   caf::make_message(snapshot_atom::value, id, std::move(name),
                                                     std::move(version)),
                                   caf::duration{peer_timeout});
    },
    [self](network_atom, std::string& id, network_policy& policy) -> caf::result<caf::message> {
      return routed<bool>(self, id, caf::make_message(network_atom::value, id, std::move(policy)),
                          caf::duration{peer_timeout});
    },
    [self](update_atom, std::string& id, std::string& cpu_class, bool set_network,
           network_policy& policy) -> caf::result<caf::message> {
      return routed<sandbox_info>(self, id,
                                  caf::make_message(update_atom::value, id, std::move(cpu_class),
                                                    set_network, std::move(policy)),
                                  caf::duration{peer_timeout});
    },
    // Trajectory log (placement_trajectory.cpp): served by a live owner,
    // else from this node's --trajectory-dir (shared in a cluster).
    [self](traj_atom, std::string& id, int64_t since) {
      return placement_trajectory(self, id, since);
    },
    [self](replay_atom, std::string& id, int64_t upto) { return placement_replay(self, id, upto); },
    [](cont_atom, continuation& c) { c.fn(); }, // INTERNAL: their disk reads' results
    [self](rebuilt_atom, std::string& id, std::string& source,
           uint64_t upto) -> caf::result<caf::message> {
      return routed<bool>(self, id,
                          caf::make_message(rebuilt_atom::value, id, std::move(source), upto),
                          caf::duration{peer_timeout});
    },
    [self](layers_atom) -> caf::result<caf::message> {
      return self->delegate(self->state.lifecycle, layers_atom::value);
    },
    [self](metrics_atom) -> caf::result<caf::message> {
      return self->delegate(self->state.lifecycle, metrics_atom::value);
    },
    // FnCall (actors/fncall.hpp): served by this node's warm pool.
    [self](fncall_atom, fncall_request& req) -> caf::result<caf::message> {
      auto fn = self->home_system().registry().get(fncall_atom::value);
      if (!fn)
        return to_caf(unavailable("node " + self_id(self) + ": fncall is not running"));
      return self->delegate(caf::actor_cast<caf::actor>(fn), fncall_atom::value, std::move(req));
    },
    // Image fetch from peers (actors/image_fetch.hpp): what this node holds
    // of `ref`, and part of an image, both served by the image-fetch actor.
    [self](fetch_atom, std::string& ref) -> caf::result<caf::message> {
      auto fetch = image_fetch_of(self->home_system());
      if (!fetch)
        return to_caf(unavailable("node " + self_id(self) + ": image fetch is not running"));
      return self->delegate(fetch, info_atom::value, std::move(ref));
    },
    [self](blob_atom, std::string& digest, uint64_t offset,
           uint32_t len) -> caf::result<caf::message> {
      auto fetch = image_fetch_of(self->home_system());
      if (!fetch)
        return to_caf(unavailable("node " + self_id(self) + ": image fetch is not running"));
      return self->delegate(fetch, blob_atom::value, std::move(digest), offset, len);
    },
    [self](status_atom) -> caf::result<caf::message> {
      return self->delegate(self->state.lifecycle, status_atom::value);
    },
    // The view, with this node's own entry fresh from the lifecycle (gossip
    // reports are up to a second old).
    [self](nodes_atom) {
      auto rp = self->make_response_promise();
      self->request(self->state.lifecycle, caf::duration{list_timeout}, status_atom::value)
        .then(
          [self, rp](node_status& ns) mutable {
            auto view = nodes_view(self);
            view.front().sandboxes = ns.sandboxes;
            view.front().creating = ns.creating;
            view.front().layers = ns.layers;
            rp.deliver(std::move(view));
          },
          [self, rp](caf::error&) mutable { rp.deliver(nodes_view(self)); });
      return rp;
    },
    // INTERNAL: from the gossip actor, on every change of the view.
    [self](view_atom, std::vector<member_info>& view) { on_view(self, view); },
  };
}

} // namespace dsec
