// Lifecycle actor implementation: admission, the sandbox table, and the
// rows that route calls to sandbox actors. The rows of the operations in
// actors/operations.hpp are generated (delegate_row): check, then delegate.
// The few that differ (create, info, destroy, cancel) and the node's own
// rows are written out here. Every sandbox actor is monitored.
#include "actors/lifecycle.hpp"

#include <set>
#include <tuple>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/disk_admission.hpp" // issue 28
#include "actors/interfaces.hpp"
#include "actors/job_ops.hpp"
#include "actors/sandbox.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/session_inspect.hpp" // shell sessions (issue 26 part 2)
#include "core/inspect.hpp"
#include "core/spec_fields.hpp"
#include "core/validate.hpp"

namespace dsec {

namespace {

/// Why this node cannot serve `spec`, or nothing.
error admission_error(const lifecycle_state& st, const sandbox_spec& spec) {
  auto& node = st.ctx->config.node_id;
  if (st.shutting_down)
    return unavailable("create: node " + node + " is shutting down");
  if (!st.ctx->backend_for(spec.backend)) {
    std::string runs;
    for (auto& [name, b] : st.ctx->backends)
      runs += (runs.empty() ? "" : ", ") + name;
    if (runs.empty())
      runs = "container";
    auto why = st.ctx->unavailable_backends.find(spec.backend);
    return invalid_argument("create: backend \"" + spec.backend + "\" is not available on node "
                            + node
                            + (why != st.ctx->unavailable_backends.end() ? ": " + why->second : "")
                            + " (this node runs: " + runs + ")");
  }
  if (!spec.node.empty() && spec.node != node)
    return not_found("create: node \"" + spec.node + "\" is not known to node " + node);
  if (st.sandboxes.size() >= st.ctx->config.max_sandboxes)
    return resource_exhausted("create: node " + node + " holds "
                              + std::to_string(st.sandboxes.size())
                              + " sandboxes, its limit; retry later or elsewhere");
  if (auto full = disk_admission_error(node, st.ctx->config.state_dir))
    return full; // issue 28: a full state volume refuses clearly
  if (auto full = volume_admission_error(node, st.ctx->quota.get()))
    return full;
  return {};
}

error bad_id(const std::string& id) {
  return invalid_argument("sandbox id \"" + id.substr(0, 80)
                          + "\" is malformed (expected <node>.<unique>)");
}

error unknown(const std::string& id) { return not_found("sandbox " + id + " not found"); }

/// Looks up a sandbox for an operation, or fails with the right error.
template <class F>
auto with_sandbox(lifecycle_actor_ptr self, const std::string& id, F f)
  -> decltype(f(std::declval<sandbox_entry&>())) {
  if (!valid_sandbox_id(id))
    return to_caf(bad_id(id));
  auto it = self->state.sandboxes.find(id);
  if (it == self->state.sandboxes.end())
    return to_caf(unknown(id));
  if (it->second.dead) // its actor exited abnormally (on_down)
    return to_caf(unavailable("sandbox " + id + " is failed (" + it->second.info.reason + ")"));
  return f(it->second);
}

void on_gone(lifecycle_actor_ptr self, const std::string& id);

// -- measured memory and admission (policy/reclaim_policy.hpp) ---------------

reclaim::admission_limits limits_of(const node_config& cfg) {
  reclaim::admission_limits lim;
  lim.headroom_mb = cfg.memory_headroom_mb;
  lim.overcommit = cfg.overcommit;
  return lim;
}

/// Adds the last measured figures of `info`'s sandbox to it.
void add_memory(const lifecycle_state& st, sandbox_info& info) {
  auto it = st.memory.by_id.find(info.id);
  if (it == st.memory.by_id.end())
    return;
  info.resident_bytes = it->second.resident_bytes;
  info.swap_bytes = it->second.swap_bytes;
  info.reclaimed_bytes = it->second.reclaimed_bytes;
  info.idle_since_ms = it->second.idle_since_ms;
}

/// Takes a reclaim report: the sample admission decides by from now on.
void apply_report(lifecycle_state& st, reclaim::memory_report& r) {
  st.memory.by_id.clear();
  for (auto& m : r.sandboxes)
    st.memory.by_id.emplace(m.id, m);
  // The sample saw every sandbox that runs; those still creating may not
  // have their memory yet.
  st.memory.reserved_mb = 0;
  for (auto& [id, e] : st.sandboxes)
    if (e.info.state == sandbox_state::creating)
      st.memory.reserved_mb += e.need_mb;
  st.memory.last = std::move(r);
}

/// After a reclaim pass: every running sandbox with an idle policy hears
/// since when its CPU was quiet (0 = busy), and decides (sandbox_idle.hpp).
void push_idle(lifecycle_actor_ptr self) {
  auto& st = self->state;
  for (auto& [id, e] : st.sandboxes) {
    if (e.spec.idle_timeout_s <= 0 || e.info.state != sandbox_state::running || e.dead
        || !e.actor)
      continue;
    if (auto it = st.memory.by_id.find(id); it != st.memory.by_id.end())
      self->send(e.actor, idle_atom::value, it->second.idle_since_ms);
  }
}

reclaim::admission_input admission_input_for(const lifecycle_state& st, const sandbox_spec& spec,
                                             bool reclaim_tried) {
  reclaim::admission_input in;
  auto& last = st.memory.last;
  in.host = last.host;
  in.reserved_mb = st.memory.reserved_mb;
  in.committed_mb = st.committed_mb;
  in.memory_mb = spec.memory_mb;
  in.need_mb = reclaim::expected_need_mb(spec.memory_mb, last.mean_resident_bytes >> 20);
  in.reclaim_tried = reclaim_tried;
  return in;
}

void start_sandbox(lifecycle_actor_ptr self, sandbox_spec spec, int64_t need_mb,
                   caf::response_promise rp);

/// The creates that waited for `request_id`'s admission run again: they find
/// its sandbox (or are admitted on their own if it was refused).
void release_followers(lifecycle_actor_ptr self, const std::string& request_id) {
  auto it = self->state.admitting.find(request_id);
  if (it == self->state.admitting.end())
    return;
  auto followers = std::move(it->second);
  self->state.admitting.erase(it);
  for (auto& f : followers) {
    auto rp = f.second;
    self->request(caf::actor_cast<lifecycle_actor>(self), caf::infinite, create_atom::value,
                  std::move(f.first))
      .then([rp](sandbox_info& info) mutable { rp.deliver(std::move(info)); },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  }
}

/// Admits `spec` by measured memory (the count and capability checks passed):
/// starts it, or reclaims first and decides again, or refuses with 429.
void admit(lifecycle_actor_ptr self, sandbox_spec spec, caf::response_promise rp,
           bool reclaim_tried) {
  auto& st = self->state;
  auto key = spec.request_id;
  if (reclaim_tried) // the table may have changed while reclaim ran
    if (auto err = admission_error(st, spec)) {
      rp.deliver(to_caf(err));
      release_followers(self, key);
      return;
    }
  auto in = admission_input_for(st, spec, reclaim_tried);
  auto lim = limits_of(st.ctx->config);
  auto a = reclaim::decide(in, lim);
  if (a.v == reclaim::verdict::reclaim_first && !st.reclaim)
    a.v = in.host.known ? reclaim::verdict::refuse_memory : reclaim::verdict::admit;
  switch (a.v) {
    case reclaim::verdict::admit:
      start_sandbox(self, std::move(spec), in.need_mb, std::move(rp));
      release_followers(self, key);
      return;
    case reclaim::verdict::reclaim_first:
      if (!key.empty())
        st.admitting[key]; // same-key creates wait for this one
      // Bounded: a reclaim pass is a few cgroup reads and squeezes; past it
      // the create decides on the sample it has.
      self->request(st.reclaim, caf::duration{local_wait}, reclaim_atom::value)
        .then(
          [self, spec, rp](reclaim::memory_report& r) mutable {
            apply_report(self->state, r);
            admit(self, std::move(spec), std::move(rp), true);
          },
          [self, spec, rp](caf::error&) mutable {
            admit(self, std::move(spec), std::move(rp), true);
          });
      return;
    default:
      rp.deliver(to_caf(resource_exhausted(
        reclaim::refusal_message(st.ctx->config.node_id, in, lim, a))));
      release_followers(self, key);
  }
}

caf::result<sandbox_info> handle_create(lifecycle_actor_ptr self, sandbox_spec& spec) {
  auto& st = self->state;
  if (!spec.request_id.empty()) {
    auto it = st.by_request.find(spec.request_id);
    if (it != st.by_request.end()) {
      auto e = st.sandboxes.find(it->second);
      if (e != st.sandboxes.end()) {
        if (!same_request(e->second.spec, spec))
          return to_caf(conflict("create: request_id \"" + spec.request_id
                                 + "\" was used for another spec (sandbox " + it->second + ")"));
        if (e->second.info.state != sandbox_state::creating)
          return e->second.info;
        return self->delegate(e->second.actor, info_atom::value);
      }
    }
  }
  // Native clients reach here without the JSON parser's checks.
  if (auto valid = validate(spec); !valid)
    return to_caf(valid.err());
  if (auto err = admission_error(st, spec))
    return to_caf(err);
  auto rp = self->make_response_promise();
  if (auto it = st.admitting.find(spec.request_id);
      !spec.request_id.empty() && it != st.admitting.end()) {
    it->second.emplace_back(std::move(spec), rp);
    return rp;
  }
  admit(self, std::move(spec), rp, false);
  return rp;
}

void start_sandbox(lifecycle_actor_ptr self, sandbox_spec spec, int64_t need_mb,
                   caf::response_promise rp) {
  auto& st = self->state;
  auto id = make_sandbox_id(st.ctx->config.node_id);
  auto actor = self->spawn(sandbox_behavior, st.ctx, caf::actor_cast<lifecycle_actor>(self), id, spec);
  self->monitor(actor);
  sandbox_entry entry;
  entry.actor = actor;
  entry.info = initial_info(id, st.ctx->config.node_id, spec);
  entry.need_mb = need_mb;
  st.memory.reserved_mb += need_mb;
  if (!spec.request_id.empty())
    st.by_request[spec.request_id] = id;
  entry.spec = std::move(spec);
  st.committed_mb += entry.spec.memory_mb;
  st.sandboxes.emplace(id, std::move(entry));
  // Answered through here, not delegated: a failed create leaves the table
  // before its caller hears of it, so the caller's next list never shows it.
  self->request(actor, caf::infinite, start_atom::value)
    .then([rp](sandbox_info& info) mutable { rp.deliver(std::move(info)); },
          [self, rp, id](caf::error& err) mutable {
            on_gone(self, id);
            rp.deliver(std::move(err));
          });
}

/// Takes the sandboxes the node recovered at start (node_context::recovered)
/// into the table, each with a sandbox actor in adopted mode.
void adopt_recovered(lifecycle_actor_ptr self) {
  auto& st = self->state;
  auto recovered = std::move(st.ctx->recovered);
  st.ctx->recovered.clear();
  for (auto& rec : recovered) {
    sandbox_entry entry;
    entry.info = recovered_info(rec, st.ctx->config.node_id);
    entry.spec = rec.spec;
    auto id = rec.id;
    if (!rec.spec.request_id.empty())
      st.by_request[rec.spec.request_id] = id;
    entry.actor = self->spawn(adopted_sandbox_behavior, st.ctx, caf::actor_cast<lifecycle_actor>(self),
                              std::move(rec));
    self->monitor(entry.actor);
    st.committed_mb += entry.spec.memory_mb;
    st.sandboxes.emplace(id, std::move(entry));
  }
}

void on_gone(lifecycle_actor_ptr self, const std::string& id) {
  auto& st = self->state;
  auto it = st.sandboxes.find(id);
  if (it == st.sandboxes.end())
    return;
  if (it->second.info.state == sandbox_state::creating) // never ran: its create failed
    ++st.create_failures_total;
  else
    ++st.destroys_total;
  // Only its own key: a dead row's key may already name a newer sandbox.
  if (auto k = st.by_request.find(it->second.spec.request_id);
      k != st.by_request.end() && k->second == id)
    st.by_request.erase(k);
  st.committed_mb -= it->second.spec.memory_mb;
  st.sandboxes.erase(it);
  if (st.shutting_down && st.sandboxes.empty()) {
    for (auto& rp : st.shutdown_waiters)
      rp.deliver(true);
    st.shutdown_waiters.clear();
  }
}

node_status make_status(lifecycle_actor_ptr self) {
  auto& st = self->state;
  node_status ns;
  ns.node_id = st.ctx->config.node_id;
  ns.version = "0.1.0";
  ns.sandboxes = static_cast<int64_t>(st.sandboxes.size());
  std::set<std::string> refs;
  for (auto& [id, e] : st.sandboxes) {
    if (e.info.state == sandbox_state::creating)
      ++ns.creating;
    refs.insert(e.spec.layers.begin(), e.spec.layers.end());
  }
  // Refs whose images this node holds (bounded, cached: never blocks), so a
  // peer missing a layer asks holders first (actors/image_fetch.hpp).
  if (st.ctx->layers)
    for (auto& r : st.ctx->layers->held_refs())
      refs.insert(r);
  ns.layers.assign(refs.begin(), refs.end());
  using namespace std::chrono;
  ns.uptime_ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count()
                 - st.ctx->started_at_ms;
  ns.creates_total = st.creates_total;
  ns.create_failures_total = st.create_failures_total;
  ns.destroys_total = st.destroys_total;
  ns.execs_total = st.ctx->execs_total.load();
  ns.backends = st.ctx->backend_report();
  // Measured memory: the reclaim actor's last pass.
  auto& last = st.memory.last;
  for (auto& m : last.sandboxes) {
    ns.resident_bytes += m.resident_bytes;
    ns.swap_bytes += m.swap_bytes;
  }
  ns.reclaimed_bytes_total = last.reclaimed_bytes_total;
  ns.idle_sandboxes = last.idle;
  if (last.host.known) {
    ns.memory_available_mb = last.host.available_mb;
    ns.memory_free_mb = reclaim::free_for_sandboxes_mb(last.host, st.memory.reserved_mb,
                                                       limits_of(st.ctx->config));
  }
  return ns;
}

// -- supervision ------------------------------------------------------------------

/// A monitored sandbox actor ended. A normal exit is the end of a destroy
/// (gone_atom already took the row out); an abnormal one leaves the row
/// failed with the reason, frees its request_id and makes calls on it fail.
void on_down(lifecycle_actor_ptr self, const caf::down_msg& dm) {
  if (!dm.reason)
    return;
  auto& st = self->state;
  for (auto& [id, e] : st.sandboxes) {
    if (e.actor.address() != dm.source)
      continue;
    e.dead = true;
    if (e.info.state == sandbox_state::creating) // its create answers the error
      return;
    e.info.state = sandbox_state::failed;
    e.info.reason = "sandbox actor exited: " + self->home_system().render(dm.reason);
    caf::aout(self) << "node " << st.ctx->config.node_id << ": lifecycle: sandbox " << id
                    << " failed: " << e.info.reason << std::endl;
    if (auto it = st.by_request.find(e.spec.request_id);
        it != st.by_request.end() && it->second == id)
      st.by_request.erase(it);
    if (st.shutting_down)
      on_gone(self, std::string{id}); // copied: the row goes
    return;
  }
}

// -- rows -------------------------------------------------------------------------

/// Lifecycle's row of a forwarded operation (actors/operations.hpp): the
/// op's check, then the sandbox's actor answers the caller (delegated).
template <class Op, class Args = typename Op::args>
struct delegate_row;

template <class Op, class... Args>
struct delegate_row<Op, ops::type_list<Args...>> {
  using reply = typename Op::reply;
  lifecycle_actor_ptr self;

  caf::result<reply> operator()(typename Op::atom, const std::string& id, Args&... xs) const {
    auto self = this->self;
    ops::node_limits lim{self->state.ctx->config.max_file_bytes};
    if (auto err = Op::check(lim, id, xs...))
      return to_caf(err);
    return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<reply> {
      return self->delegate(e.actor, Op::atom::value, std::move(xs)...);
    });
  }
};

template <class... Ops>
auto delegate_rows(lifecycle_actor_ptr self, ops::type_list<Ops...>) {
  return std::make_tuple(delegate_row<Ops>{self}...);
}

/// /metrics: every running sandbox's info with its live denial counts.
caf::result<std::vector<sandbox_info>> gather_metrics(lifecycle_actor_ptr self) {
  struct gather {
    std::vector<sandbox_info> out;
    size_t left = 0;
    caf::response_promise rp;
  };
  auto g = std::make_shared<gather>();
  g->rp = self->make_response_promise();
  auto live = [](const sandbox_entry& e) {
    return !e.dead
           && (e.info.state == sandbox_state::running || e.info.state == sandbox_state::paused);
  };
  for (auto& [id, e] : self->state.sandboxes)
    if (live(e))
      ++g->left;
  if (g->left == 0) {
    g->rp.deliver(std::move(g->out));
    return g->rp;
  }
  auto done = [g] {
    if (--g->left == 0)
      g->rp.deliver(std::move(g->out));
  };
  for (auto& [id, e] : self->state.sandboxes)
    if (live(e))
      self->request(e.actor, local_wait, info_atom::value)
        .then(
          [self, g, done](sandbox_info& info) {
            add_memory(self->state, info);
            g->out.push_back(std::move(info));
            done();
          },
          [done](caf::error&) { done(); });
  return g->rp;
}

std::vector<sandbox_info> list_local(lifecycle_actor_ptr self, const label_map& labels) {
  std::vector<sandbox_info> out;
  for (auto& [id, e] : self->state.sandboxes) {
    bool match = true;
    for (auto& [k, v] : labels) {
      auto it = e.info.labels.find(k);
      match = match && it != e.info.labels.end() && it->second == v;
    }
    if (match) {
      out.push_back(e.info);
      add_memory(self->state, out.back());
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) {
    return a.created_at_ms < b.created_at_ms
           || (a.created_at_ms == b.created_at_ms && a.id < b.id);
  });
  return out;
}

caf::result<bool> handle_destroy(lifecycle_actor_ptr self, const std::string& id) {
  if (!valid_sandbox_id(id))
    return to_caf(bad_id(id));
  auto it = self->state.sandboxes.find(id);
  if (it == self->state.sandboxes.end())
    return false; // idempotent: already gone
  if (it->second.dead) { // nothing left to ask: the row goes
    on_gone(self, id);
    return true;
  }
  // The entry goes before the answer: a get, list or exec after destroy
  // returned must not find the sandbox (its gone_atom then finds nothing).
  auto rp = self->make_response_promise();
  self->request(it->second.actor, caf::infinite, destroy_atom::value)
    .then(
      [self, rp, id](bool existed) mutable {
        on_gone(self, id);
        rp.deliver(existed);
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<bool> handle_shutdown(lifecycle_actor_ptr self) {
  auto& st = self->state;
  st.shutting_down = true;
  std::vector<std::string> dead;
  for (auto& [id, e] : st.sandboxes)
    if (e.dead)
      dead.push_back(id);
  for (auto& id : dead)
    on_gone(self, id);
  auto rp = self->make_response_promise();
  if (st.sandboxes.empty()) {
    rp.deliver(true);
    return rp;
  }
  st.shutdown_waiters.push_back(rp);
  for (auto& [id, e] : st.sandboxes)
    self->request(e.actor, caf::infinite, destroy_atom::value)
      .then([](bool) {}, [](caf::error&) {});
  return rp;
}

/// The rows about sandboxes that are not forwarded as they are.
auto sandbox_rows(lifecycle_actor_ptr self) {
  return std::make_tuple(
    [self](create_atom, sandbox_spec& spec) { return handle_create(self, spec); },
    // info asks the sandbox actor (it adds the live denial counts) unless
    // the sandbox is still being created (its actor answers only then) or
    // its actor is gone.
    [self](info_atom, const std::string& id) -> caf::result<sandbox_info> {
      if (auto it = self->state.sandboxes.find(id);
          it != self->state.sandboxes.end() && it->second.dead)
        return it->second.info;
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<sandbox_info> {
        if (e.info.state == sandbox_state::creating)
          return e.info;
        auto rp = self->make_response_promise();
        self->request(e.actor, caf::infinite, info_atom::value)
          .then(
            [self, rp](sandbox_info& info) mutable {
              add_memory(self->state, info);
              rp.deliver(std::move(info));
            },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      });
    },
    [self](metrics_atom) { return gather_metrics(self); },
    [self](list_atom, const label_map& labels) { return list_local(self, labels); },
    // Job-level pause/resume: every local sandbox matching (actors/job_ops.hpp).
    [self](job_atom, const label_map& labels, bool pause) {
      return run_job_local(self, labels, pause);
    },
    [self](destroy_atom, const std::string& id) { return handle_destroy(self, id); },
    [self](cancel_atom, const std::string& id, uint64_t token) {
      auto it = self->state.sandboxes.find(id);
      if (it != self->state.sandboxes.end())
        self->send(it->second.actor, cancel_atom::value, token);
    });
}

/// What the node's own actors ask and tell.
auto node_rows(lifecycle_actor_ptr self) {
  return std::make_tuple(
    [self](layers_atom) -> caf::result<std::vector<layer_info>> {
      auto rp = self->make_response_promise();
      auto src = self->state.ctx->layers;
      run_blocking(self, *self->state.ctx->pool, [src] { return src->list(); },
                   [rp](expected<std::vector<layer_info>>& layers) mutable {
                     if (layers)
                       rp.deliver(*layers);
                     else
                       rp.deliver(to_caf(layers.err()));
                   });
      return rp;
    },
    [self](status_atom) { return make_status(self); },
    [self](state_atom, sandbox_info& info) {
      auto it = self->state.sandboxes.find(info.id);
      if (it == self->state.sandboxes.end() || it->second.dead)
        return;
      if (it->second.info.state == sandbox_state::creating && info.state == sandbox_state::running)
        ++self->state.creates_total;
      it->second.info = std::move(info);
    },
    [self](gone_atom, const std::string& id) { on_gone(self, id); },
    // INTERNAL, reclaim: from the supervisor, the actor to reclaim with.
    [self](reclaim_atom, const reclaim_actor& reclaim) { self->state.reclaim = reclaim; },
    // INTERNAL, reclaim: every live sandbox, for a reclaim pass.
    [self](usage_atom) {
      std::vector<reclaim_target> out;
      for (auto& [id, e] : self->state.sandboxes)
        if (!e.dead)
          out.push_back(reclaim_target{id, e.info.state, e.actor});
      return out;
    },
    // INTERNAL, reclaim: the last pass's figures.
    [self](usage_atom, reclaim::memory_report& r) {
      apply_report(self->state, r);
      push_idle(self);
    },
    [self](shutdown_atom) { return handle_shutdown(self); },
    [](cont_atom, continuation& c) { c.fn(); });
}

} // namespace

lifecycle_actor::behavior_type lifecycle_behavior(lifecycle_actor_ptr self, node_context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  adopt_recovered(self);
  auto rows = std::tuple_cat(sandbox_rows(self), node_rows(self),
                             delegate_rows(self, ops::forwarded_ops{}));
  return std::apply(
    [](auto&... row) { return lifecycle_actor::behavior_type{std::move(row)...}; }, rows);
}

} // namespace dsec
