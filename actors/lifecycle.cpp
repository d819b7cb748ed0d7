// Lifecycle actor implementation.
#include "actors/lifecycle.hpp"

#include <set>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/job_ops.hpp"
#include "actors/sandbox.hpp"
#include "core/ids.hpp"
#include "core/fs_entry_inspect.hpp"
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
  return f(it->second);
}

void on_gone(lifecycle_actor_ptr self, const std::string& id);

// -- measured memory and admission (actors/reclaim_policy.hpp) ---------------

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
      self->request(st.reclaim, std::chrono::seconds(10), reclaim_atom::value)
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
  if (!it->second.spec.request_id.empty())
    st.by_request.erase(it->second.spec.request_id);
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

} // namespace

lifecycle_actor::behavior_type lifecycle_behavior(lifecycle_actor_ptr self, node_context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  adopt_recovered(self);
  return {
    [self](create_atom, sandbox_spec& spec) { return handle_create(self, spec); },
    // info asks the sandbox actor (it adds the live denial counts) unless
    // the sandbox is still being created (its actor answers only then).
    [self](info_atom, const std::string& id) -> caf::result<sandbox_info> {
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
    // /metrics: every running sandbox's info with its live denial counts.
    [self](metrics_atom) -> caf::result<std::vector<sandbox_info>> {
      struct gather {
        std::vector<sandbox_info> out;
        size_t left = 0;
        caf::response_promise rp;
      };
      auto g = std::make_shared<gather>();
      g->rp = self->make_response_promise();
      for (auto& [id, e] : self->state.sandboxes)
        if (e.info.state == sandbox_state::running || e.info.state == sandbox_state::paused)
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
        if (e.info.state == sandbox_state::running || e.info.state == sandbox_state::paused)
          self->request(e.actor, std::chrono::seconds(5), info_atom::value)
            .then([self, g, done](sandbox_info& info) {
                    add_memory(self->state, info);
                    g->out.push_back(std::move(info));
                    done();
                  },
                  [done](caf::error&) { done(); });
      return g->rp;
    },
    [self](pause_atom, const std::string& id) -> caf::result<sandbox_info> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<sandbox_info> {
        return self->delegate(e.actor, pause_atom::value);
      });
    },
    [self](resume_atom, const std::string& id) -> caf::result<sandbox_info> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<sandbox_info> {
        return self->delegate(e.actor, resume_atom::value);
      });
    },
    [self](snapshot_atom, const std::string& id, std::string& name,
           std::string& version) -> caf::result<snapshot_info> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<snapshot_info> {
        return self->delegate(e.actor, snapshot_atom::value, std::move(name), std::move(version));
      });
    },
    [self](network_atom, const std::string& id,
           network_policy& policy) -> caf::result<bool> {
      if (auto valid = validate(policy); !valid)
        return to_caf(valid.err());
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, network_atom::value, std::move(policy));
      });
    },
    [self](update_atom, const std::string& id, std::string& cpu_class, bool set_network,
           network_policy& policy) -> caf::result<sandbox_info> {
      if (cpu_class.empty() && !set_network)
        return to_caf(invalid_argument("update " + id + ": nothing to change"));
      if (!cpu_class.empty())
        if (auto valid = validate_cpu_class(cpu_class); !valid)
          return to_caf(valid.err());
      if (set_network)
        if (auto valid = validate(policy); !valid)
          return to_caf(valid.err());
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<sandbox_info> {
        return self->delegate(e.actor, update_atom::value, std::move(cpu_class), set_network,
                              std::move(policy));
      });
    },
    [self](list_atom, const label_map& labels) {
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
      std::sort(out.begin(), out.end(),
                [](auto& a, auto& b) { return a.created_at_ms < b.created_at_ms || (a.created_at_ms == b.created_at_ms && a.id < b.id); });
      return out;
    },
    // Job-level pause/resume: every local sandbox matching (actors/job_ops.hpp).
    [self](job_atom, const label_map& labels, bool pause) {
      return run_job_local(self, labels, pause);
    },
    [self](destroy_atom, const std::string& id) -> caf::result<bool> {
      if (!valid_sandbox_id(id))
        return to_caf(bad_id(id));
      auto it = self->state.sandboxes.find(id);
      if (it == self->state.sandboxes.end())
        return false; // idempotent: already gone
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
    },
    [self](exec_atom, const std::string& id, exec_request& req,
           uint64_t token) -> caf::result<exec_result> {
      if (auto valid = validate(req); !valid)
        return to_caf(valid.err());
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<exec_result> {
        return self->delegate(e.actor, exec_atom::value, std::move(req), token);
      });
    },
    // Every chunk reaches `sink` before the answer (actors/chunk_relay.hpp).
    [self](stream_atom, const std::string& id, exec_request& req, caf::actor& sink,
           uint64_t token) -> caf::result<exec_result> {
      if (auto valid = validate(req); !valid)
        return to_caf(valid.err());
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<exec_result> {
        return self->delegate(e.actor, stream_atom::value, std::move(req), std::move(sink), token);
      });
    },
    [self](bgexec_atom, const std::string& id, exec_request& req) -> caf::result<background_process> {
      if (auto valid = validate(req); !valid)
        return to_caf(valid.err());
      if (!req.step.empty()) // a step's result is what the log keeps; a background one has none yet
        return to_caf(invalid_argument("exec: step cannot be combined with background"));
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<background_process> {
        return self->delegate(e.actor, bgexec_atom::value, std::move(req));
      });
    },
    [self](bgexec_atom, const std::string& id, exec_request& req,
           bool keep_stdin) -> caf::result<background_process> {
      if (auto valid = validate(req); !valid)
        return to_caf(valid.err());
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<background_process> {
        return self->delegate(e.actor, bgexec_atom::value, std::move(req), keep_stdin);
      });
    },
    [self](stdin_atom, const std::string& id, int32_t pid, std::string& data,
           bool close) -> caf::result<bool> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, stdin_atom::value, pid, std::move(data), close);
      });
    },
    [self](procs_atom, const std::string& id) -> caf::result<std::vector<process_info>> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<std::vector<process_info>> {
        return self->delegate(e.actor, procs_atom::value);
      });
    },
    [self](proc_atom, const std::string& id, int32_t pid,
           int64_t wait_ms) -> caf::result<background_process> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<background_process> {
        return self->delegate(e.actor, proc_atom::value, pid, wait_ms);
      });
    },
    [self](signal_atom, const std::string& id, int32_t pid, int32_t signo,
           bool group) -> caf::result<bool> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, signal_atom::value, pid, signo, group);
      });
    },
    // -- push streams (issue 24 part 2): to the sandbox actor, which sends the
    // sink the output or events (actors/sandbox_procs.hpp, sandbox_watch.hpp).
    [self](follow_atom, const std::string& id, int32_t pid, caf::actor& sink,
           uint64_t token) -> caf::result<background_process> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<background_process> {
        return self->delegate(e.actor, follow_atom::value, pid, std::move(sink), token);
      });
    },
    [self](watch_atom, const std::string& id, std::string& path, bool recursive,
           caf::actor& sink, uint64_t token) -> caf::result<bool> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, watch_atom::value, std::move(path), recursive,
                              std::move(sink), token);
      });
    },
    // -- end push streams
    [self](cancel_atom, const std::string& id, uint64_t token) {
      auto it = self->state.sandboxes.find(id);
      if (it != self->state.sandboxes.end())
        self->send(it->second.actor, cancel_atom::value, token);
    },
    [self](wfile_atom, const std::string& id, std::string& path,
           std::string& data) -> caf::result<bool> {
      auto max = self->state.ctx->config.max_file_bytes;
      if (data.size() > max)
        return to_caf(too_large("write " + path + " in sandbox " + id + ": "
                                + std::to_string(data.size()) + " bytes, over the node's limit of "
                                + std::to_string(max)));
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, wfile_atom::value, std::move(path), std::move(data));
      });
    },
    [self](rfile_atom, const std::string& id, std::string& path,
           uint64_t max_bytes) -> caf::result<std::string> {
      // A caller may ask for less than the node's limit, never more.
      max_bytes = std::min<uint64_t>(max_bytes, self->state.ctx->config.max_file_bytes);
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<std::string> {
        return self->delegate(e.actor, rfile_atom::value, std::move(path), max_bytes);
      });
    },
    // A replay notes its source in the new sandbox's log (sandbox_replay.hpp).
    [self](rebuilt_atom, const std::string& id, std::string& source,
           uint64_t upto) -> caf::result<bool> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<bool> {
        return self->delegate(e.actor, rebuilt_atom::value, std::move(source), upto);
      });
    },
    [self](fsop_atom, const std::string& id, std::string& op, std::string& path, std::string& to,
           int32_t depth) -> caf::result<std::vector<fs_entry>> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<std::vector<fs_entry>> {
        return self->delegate(e.actor, fsop_atom::value, std::move(op), std::move(path),
                              std::move(to), depth);
      });
    },
    [self](setttl_atom, const std::string& id, int64_t ttl_s) -> caf::result<sandbox_info> {
      return with_sandbox(self, id, [&](sandbox_entry& e) -> caf::result<sandbox_info> {
        return self->delegate(e.actor, setttl_atom::value, ttl_s);
      });
    },
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
      if (it == self->state.sandboxes.end())
        return;
      if (it->second.info.state == sandbox_state::creating && info.state == sandbox_state::running)
        ++self->state.creates_total;
      it->second.info = std::move(info);
    },
    [self](gone_atom, const std::string& id) { on_gone(self, id); },
    // INTERNAL, reclaim: from the supervisor, the actor to reclaim with.
    [self](reclaim_atom, const reclaim_actor& reclaim) { self->state.reclaim = reclaim; },
    // INTERNAL, reclaim: every sandbox, for a reclaim pass.
    [self](usage_atom) {
      std::vector<reclaim_target> out;
      for (auto& [id, e] : self->state.sandboxes)
        out.push_back(reclaim_target{id, e.info.state, e.actor});
      return out;
    },
    // INTERNAL, reclaim: the last pass's figures.
    [self](usage_atom, reclaim::memory_report& r) { apply_report(self->state, r); },
    [self](shutdown_atom) -> caf::result<bool> {
      auto& st = self->state;
      st.shutting_down = true;
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
    },
    [](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace dsec
