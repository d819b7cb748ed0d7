// Sandbox actor implementation. Every blocking step (mount, clone, file I/O,
// teardown) runs through run_blocking; exec completions arrive as
// continuations from the backend's I/O thread.
#include "actors/sandbox.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/interfaces.hpp"
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_pause.hpp"
#include "actors/sandbox_metrics.hpp"
#include "actors/sandbox_procs.hpp"
#include "actors/sandbox_ports.hpp"
#include "actors/sandbox_record.hpp"
#include "actors/sandbox_session.hpp" // shell sessions (issue 26 part 2)
#include "actors/sandbox_watch.hpp" // push streams (issue 24 part 2)
#include "actors/sandbox_ttl.hpp"
#include "actors/sandbox_trajectory.hpp"
#include "actors/sandbox_update.hpp"
#include "actors/sandbox_pty.hpp" // terminals (issue 26 part 1)
#include "core/clock.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/session_inspect.hpp" // shell sessions (issue 26 part 2)
#include "core/inspect.hpp"
#include "core/json_codec.hpp"
#include "sys/fs.hpp"

namespace dsec {

namespace {

void notify_lifecycle(sandbox_actor_ptr self) {
  self->send(self->state.lifecycle, state_atom::value, self->state.info);
}

} // namespace

void maybe_quit(sandbox_actor_ptr self) {
  auto& st = self->state;
  if (st.destroyed && st.inflight == 0) {
    for (auto& op : st.after_resume)
      op.rp.deliver(to_caf(unavailable("sandbox " + st.info.id + " was destroyed")));
    st.after_resume.clear();
    for (auto& rp : st.destroy_waiters)
      rp.deliver(true);
    st.destroy_waiters.clear();
    self->send(st.lifecycle, gone_atom::value, st.info.id);
    self->quit();
  }
}

namespace {

/// Takes the backend sandbox and the layer mounts out of `st` and returns the
/// blocking job that releases them.
std::function<status()> take_teardown(sandbox_actor_state& st) {
  st.released = true;
  auto digests = std::move(st.digests);
  st.digests.clear();
  return [ctx = st.ctx, sb = st.sb, digests, batch = st.info.cpu_class != "latency",
          ttl_file = st.ttl.file] {
    ttl_close(*ttl_file); // no TTL write into a record being removed
    status res;
    // Killed tasks of a batch sandbox would exit at SCHED_IDLE's pace on a
    // busy node (seconds): promote them first, so destroy is as quick as ever.
    if (sb && batch)
      (void)sb->set_cpu_class("latency");
    if (sb)
      res = sb->destroy();
    ctx->layers->release(digests);
    return res;
  };
}

} // namespace

void begin_destroy(sandbox_actor_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.destroying)
    return;
  if (st.booting) { // end_boot begins it
    if (!st.destroy_after_boot)
      st.destroy_after_boot = why;
    return;
  }
  st.destroying = true;
  if (st.info.state == sandbox_state::running || st.info.state == sandbox_state::creating)
    st.info.state = sandbox_state::stopped;
  fail_waiters(self, unavailable("sandbox " + st.info.id + " is being destroyed"));
  if (st.info.reason.empty() && !why.empty())
    st.info.reason = why;
  notify_lifecycle(self);
  trajectory_destroyed(self, why);
  run_blocking(self, *st.ctx->pool, take_teardown(st),
               [self](status& res) {
                 if (!res)
                   caf::aout(self) << "sandbox " << self->state.info.id
                                   << ": destroy left something behind: " << res.err().message
                                   << std::endl;
                 self->state.destroyed = true;
                 self->state.sb.reset();
                 maybe_quit(self);
               });
}

namespace {

/// Carries out what an idle policy or the TTL's end asks (sandbox_idle.hpp):
/// a pause answers no one (a failed one leaves the sandbox running, its
/// TTL armed again), a destroy gives its reason.
static void apply_policy(sandbox_actor_ptr self, const policy_action& a) {
  if (a.kind == policy_action::destroy) {
    begin_destroy(self, a.reason);
  } else if (a.kind == policy_action::pause) {
    ttl_arm(self);
    change_pause(self, caf::response_promise{}, true, a.keep_memory);
  }
}

/// The sandbox died by itself: release what it held, keep answering as failed.
void on_died(sandbox_actor_ptr self, const std::string& reason) {
  auto& st = self->state;
  if (st.destroying || st.info.state != sandbox_state::running)
    return;
  st.info.state = sandbox_state::failed;
  st.info.reason = reason;
  notify_lifecycle(self);
  st.ctx->pool->post([job = take_teardown(st)] { (void)job(); });
}

} // namespace

sandbox_actor_state::~sandbox_actor_state() {
  if (released || !sb || !ctx || !ctx->pool || !ttl.file)
    return;
  ctx->pool->post([job = take_teardown(*this)] { (void)job(); });
}

error not_running(const sandbox_actor_state& st) {
  auto s = to_string(st.info.state);
  std::string msg = "sandbox " + st.info.id + " is " + s;
  if (!st.info.reason.empty())
    msg += " (" + st.info.reason + ")";
  return unavailable(std::move(msg)); // a paused sandbox is resumed, never refused
}

/// Answers `rp` with an error unless the sandbox takes operations now.
static bool accepts_ops(sandbox_actor_ptr self, caf::response_promise& rp) {
  auto& st = self->state;
  if (st.info.state == sandbox_state::running && !st.destroying && st.sb)
    return true;
  rp.deliver(to_caf(not_running(st)));
  return false;
}

static void begin_resume(sandbox_actor_ptr self);

/// Whether the operation answering `rp` can run now. On a sandbox that is
/// paused, being paused or being resumed it waits in after_resume, as `run`,
/// and a resume starts unless one is under way (transparent resume); on one
/// that is gone `rp` gets the error. Either way false means "not now".
bool ready_for(sandbox_actor_ptr self, caf::response_promise& rp,
               std::function<void(caf::response_promise)> run) {
  auto& st = self->state;
  idle_on_call(self);
  bool paused = st.info.state == sandbox_state::paused || st.pausing;
  if (paused && !st.destroying && st.sb && !st.spec.auto_resume) {
    rp.deliver(to_caf(error{errc::unavailable,
                            "sandbox " + st.info.id + " is paused and resumes only when asked "
                            "(its auto_resume is false): resume it first"}));
    return false;
  }
  if (paused && !st.destroying && st.sb) {
    st.after_resume.push_back({rp, std::move(run)});
    if (!st.changing)
      begin_resume(self);
    return false;
  }
  return accepts_ops(self, rp);
}

/// After a pause, resume or snapshot ended (`last` its outcome): the
/// operations that waited run if the sandbox runs, or start a resume if it
/// is (still) paused, or get the error of the resume that failed.
void run_deferred(sandbox_actor_ptr self, const status& last) {
  auto& st = self->state;
  if (st.after_resume.empty())
    return;
  bool paused = st.info.state == sandbox_state::paused && !st.destroying && st.sb;
  if (paused && last) { // a pause (or a snapshot of a paused sandbox) ended
    begin_resume(self);
    return;
  }
  auto ops = std::move(st.after_resume);
  st.after_resume.clear();
  for (auto& op : ops) {
    if (paused) // the resume failed
      op.rp.deliver(to_caf(error{last.err().code, "resume " + st.info.id
                                                    + " for a call on it: " + last.err().message}));
    else
      op.run(std::move(op.rp));
  }
}

/// Resumes a paused sandbox for the operations waiting in after_resume.
static void begin_resume(sandbox_actor_ptr self) {
  auto& st = self->state;
  ++st.inflight;
  st.changing = true;
  st.booting = st.sb->powered_off();
  run_blocking(self, *st.ctx->pool, resume_job(st),
               [self](expected<std::shared_ptr<backends::sandbox>>& res) {
                 auto& st = self->state;
                 st.changing = false;
                 --st.inflight;
                 if (res && !st.destroying) {
                   adopt_resumed(self, std::move(*res));
                   st.info.state = sandbox_state::running;
                   ttl_on_resumed(self);
                   notify_lifecycle(self);
                 }
                 run_deferred(self, res ? status{} : status{res.err()});
                 end_boot(self);
                 maybe_quit(self);
               });
}

namespace {

void start_exec(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
                std::function<void(exec_chunk)> sink, uint64_t token) {
  auto& st = self->state;
  if (token != 0 && st.cancelled_early.erase(token) > 0) {
    rp.deliver(to_caf(error{errc::unavailable, "exec in " + st.info.id
                                               + ": cancelled while the sandbox resumed"}));
    return;
  }
  auto retry = [self, req, sink, token](caf::response_promise rp) mutable {
    start_exec(self, std::move(rp), std::move(req), std::move(sink), token);
  };
  if (!ready_for(self, rp, std::move(retry)))
    return;
  ++st.inflight;
  ++st.ctx->execs_total;
  auto hdl = caf::actor_cast<caf::actor>(self);
  backends::exec_callbacks cb;
  if (sink)
    cb.on_output = std::move(sink);
  auto started = req.received_ns > 0
                   ? std::chrono::steady_clock::time_point{std::chrono::nanoseconds{req.received_ns}}
                   : std::chrono::steady_clock::now();
  apply_exec_defaults(st, req);
  auto logged = trajectory_begin(self, req);
  cb.on_done = [hdl, rp, self, token, started, logged](expected<exec_result> res) mutable {
    run_in(hdl, [self, rp, token, started, logged, res = std::move(res)]() mutable {
      if (token != 0)
        self->state.cancellable.erase(token);
      if (res)
        res->node_ms = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - started).count();
      if (logged) // answered once the record is written
        return trajectory_exec_done(self, rp, logged, std::move(res));
      finish_op(self, rp, res);
    });
  };
  auto exec_id = st.sb->exec(std::move(req), std::move(cb));
  if (token != 0)
    st.cancellable[token] = exec_id;
}

template <class Work>
void file_op(sandbox_actor_ptr self, caf::response_promise rp, Work work) {
  if (!ready_for(self, rp, [self, work](caf::response_promise rp) { file_op(self, rp, work); }))
    return;
  auto& st = self->state;
  ++st.inflight;
  auto sb = st.sb;
  run_blocking(self, *st.ctx->pool, [sb, work] { return work(*sb); },
               [self, rp](auto& res) mutable { finish_op(self, rp, res); });
}

/// Replaces the network policy (the sandbox resumed first if paused).
void set_network(sandbox_actor_ptr self, caf::response_promise rp, network_policy policy) {
  if (!ready_for(self, rp, [self, policy](caf::response_promise rp) {
        set_network(self, std::move(rp), policy);
      }))
    return;
  auto& st = self->state;
  ++st.inflight;
  run_blocking(self, *st.ctx->pool,
               [sb = st.sb, policy]() -> expected<network_policy> {
                 if (auto res = sb->set_network(policy); !res)
                   return res.err();
                 return policy;
               },
               [self, rp](expected<network_policy>& res) mutable {
                 expected<bool> out = true;
                 if (res)
                   self->state.spec.network = std::move(*res);
                 else
                   out = res.err();
                 finish_op(self, rp, out);
               });
}

sandbox_actor::behavior_type sandbox_handlers(sandbox_actor_ptr self);

} // namespace

void run_exec(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
              std::function<void(exec_chunk)> sink, uint64_t token) {
  start_exec(self, std::move(rp), std::move(req), std::move(sink), token);
}

void report_state(sandbox_actor_ptr self) { notify_lifecycle(self); }

void apply_exec_defaults(const sandbox_actor_state& st, exec_request& req) {
  if (req.cwd.empty())
    req.cwd = st.exec_workdir;
  if (req.user.empty())
    req.user = st.exec_user;
}

void end_op(sandbox_actor_ptr self) {
  --self->state.inflight;
  maybe_quit(self);
}

void end_boot(sandbox_actor_ptr self) {
  auto& st = self->state;
  st.booting = false;
  if (auto why = std::move(st.destroy_after_boot)) {
    st.destroy_after_boot.reset();
    begin_destroy(self, *why);
  }
}

void watch_exit(sandbox_actor_ptr self) {
  auto hdl = caf::actor_cast<caf::actor>(self);
  self->state.sb->on_exit([hdl](std::string reason) {
    caf::anon_send(hdl, died_atom::value, std::move(reason));
  });
}

sandbox_info initial_info(const std::string& id, const std::string& node,
                          const sandbox_spec& spec) {
  sandbox_info info;
  info.id = id;
  info.node = node;
  info.state = sandbox_state::creating;
  info.backend = spec.backend;
  info.layers = spec.layers;
  info.labels = spec.labels;
  info.cpu = spec.cpu;
  info.memory_mb = spec.memory_mb;
  info.disk_mb = spec.disk_mb;
  info.cpu_class = spec.cpu_class;
  info.ttl_s = spec.ttl_s;
  info.paused_ttl_s = spec.paused_ttl_s;
  info.on_timeout = spec.on_timeout;
  info.idle_timeout_s = spec.idle_timeout_s;
  info.on_idle = spec.on_idle;
  info.auto_resume = spec.auto_resume;
  info.image = spec.image;
  info.created_at_ms = now_ms();
  return info;
}

sandbox_info recovered_info(const recovered_sandbox& rec, const std::string& node) {
  // Running as the record says; ttl_adopt makes it paused if it was.
  auto info = initial_info(rec.id, node, rec.spec);
  info.state = sandbox_state::running;
  info.created_at_ms = rec.created_at_ms;
  info.expires_at_ms = rec.expires_at_ms;
  if (!rec.cpu_class.empty())
    info.cpu_class = rec.cpu_class;
  return info;
}

sandbox_actor::behavior_type sandbox_behavior(sandbox_actor_ptr self, node_context_ptr ctx,
                                              lifecycle_actor lifecycle, std::string id,
                                              sandbox_spec spec) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.lifecycle = std::move(lifecycle);
  st.info = initial_info(id, st.ctx->config.node_id, spec);
  st.log = make_trajectory(*st.ctx, id, spec);
  st.spec = std::move(spec);
  st.idle.last_call_ms = now_ms();
  return sandbox_handlers(self);
}

sandbox_actor::behavior_type adopted_sandbox_behavior(sandbox_actor_ptr self,
                                                      node_context_ptr ctx,
                                                      lifecycle_actor lifecycle,
                                                      recovered_sandbox rec) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.lifecycle = std::move(lifecycle);
  st.info = recovered_info(rec, st.ctx->config.node_id);
  st.log = make_trajectory(*st.ctx, rec.id, rec.spec); // opened (read) on first use
  st.spec = std::move(rec.spec);
  st.idle.last_call_ms = now_ms();
  st.sb = std::move(rec.sb);
  st.digests = std::move(rec.digests);
  st.exec_workdir = std::move(rec.exec_workdir);
  st.exec_user = std::move(rec.exec_user);
  ttl_adopt(self, rec); // paused again if it was
  // The record of a pause or resume is written after its answer: a node
  // killed in between left a record that says otherwise. What the sandbox
  // is wins: powered off or frozen is paused from now, thawed is running.
  auto frozen = st.sb->frozen();
  if ((st.sb->powered_off() || frozen.value_or(false))
      && st.info.state != sandbox_state::paused) {
    st.info.state = sandbox_state::paused;
    ttl_on_paused(self);
  } else if (frozen == false && st.info.state == sandbox_state::paused) {
    st.info.state = sandbox_state::running;
    ttl_on_resumed(self);
  }
  // The lifecycle lists it from recovered_info (running) until told.
  if (st.info.state != sandbox_state::running)
    notify_lifecycle(self);
  watch_exit(self);
  return sandbox_handlers(self);
}

namespace {

sandbox_actor::behavior_type sandbox_handlers(sandbox_actor_ptr self) {
  // -- push streams (issue 24 part 2): the sinks it monitors (sandbox_procs.hpp).
  self->set_down_handler([self](caf::down_msg& dm) { on_sink_down(self, dm.source); });
  // -- end push streams
  return {
    [self](start_atom) -> caf::result<sandbox_info> {
      auto rp = self->make_response_promise();
      start_sandbox(self, rp);
      return rp;
    },
    [self](exec_atom, exec_request& req, uint64_t token) -> caf::result<exec_result> {
      auto rp = self->make_response_promise();
      apply_exec_defaults(self->state, req); // before the log compares steps
      trajectory_exec(self, rp, std::move(req), nullptr, token);
      return rp;
    },
    // Every chunk goes to `sink` before the answer (actors/chunk_relay.hpp).
    [self](stream_atom, exec_request& req, caf::actor& sink,
           uint64_t token) -> caf::result<exec_result> {
      auto rp = self->make_response_promise();
      apply_exec_defaults(self->state, req);
      trajectory_exec(self, rp, std::move(req), chunk_sender(std::move(sink), token), token);
      return rp;
    },
    [self](cancel_atom, uint64_t token) {
      auto& st = self->state;
      auto it = st.cancellable.find(token);
      if (it != st.cancellable.end() && st.sb)
        st.sb->cancel(it->second);
      else if (!st.after_resume.empty()) // it may wait for a resume
        st.cancelled_early.insert(token);
    },
    [self](wfile_atom, std::string& path, std::string& data) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      trajectory_write_file(self, rp, std::move(path), std::move(data));
      return rp;
    },
    // The log notes a rebuild (actors/sandbox_replay.hpp).
    [self](rebuilt_atom, std::string& source, uint64_t upto) -> caf::result<bool> {
      trajectory::record rec;
      rec.kind = "rebuilt";
      rec.source = std::move(source);
      rec.upto_seq = upto;
      auto rp = self->make_response_promise();
      trajectory_note(self, rp, std::move(rec));
      return rp;
    },
    [self](rfile_atom, std::string& path, uint64_t max_bytes) -> caf::result<std::string> {
      auto rp = self->make_response_promise();
      file_op(self, rp, [path, max_bytes](backends::sandbox& sb) {
        return sb.read_file(path, static_cast<size_t>(max_bytes));
      });
      return rp;
    },
    [self](fsop_atom, std::string& op, std::string& path, std::string& to,
           int32_t depth) -> caf::result<std::vector<fs_entry>> {
      auto rp = self->make_response_promise();
      file_op(self, rp, [op, path, to, depth](backends::sandbox& sb) {
        return sb.file_op(op, path, to, depth);
      });
      return rp;
    },
    // A new TTL from now (E2B setTimeout / connect); 0 = none. Counts
    // running time like any TTL: on a paused sandbox it starts at resume.
    [self](setttl_atom, int64_t ttl_s) -> caf::result<sandbox_info> {
      auto& st = self->state;
      if (ttl_s < 0 || ttl_s > spec_limits::max_ttl_s)
        return to_caf(invalid_argument("timeout: must be between 0 and 2592000 seconds"));
      if (st.destroying || st.destroyed)
        return to_caf(not_running(st));
      ttl_set(self, ttl_s);
      notify_lifecycle(self);
      return st.info;
    },
    [self](info_atom) {
      auto& st = self->state;
      if (st.sb) {
        st.info.denials = st.sb->denials();
      }
      return st.info;
    },
    // The reclaim actor measures and squeezes the backend sandbox itself,
    // on the worker pool (actors/reclaim.hpp); weak, empty before it runs.
    [self](usage_atom) { return backend_ref{self->state.sb}; },
    [self](pause_atom) -> caf::result<sandbox_info> {
      auto rp = self->make_response_promise();
      change_pause(self, rp, true);
      return rp;
    },
    [self](pausefiles_atom) -> caf::result<sandbox_info> {
      auto rp = self->make_response_promise();
      change_pause(self, rp, true, false);
      return rp;
    },
    [self](resume_atom) -> caf::result<sandbox_info> {
      auto rp = self->make_response_promise();
      change_pause(self, rp, false);
      return rp;
    },
    [self](snapshot_atom, std::string& name,
           std::string& version) -> caf::result<snapshot_info> {
      auto rp = self->make_response_promise();
      start_snapshot(self, rp, std::move(name), std::move(version));
      return rp;
    },
    [self](network_atom, network_policy& policy) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      set_network(self, rp, std::move(policy));
      return rp;
    },
    [self](update_atom, std::string& cls, bool set_net,
           network_policy& policy) -> caf::result<sandbox_info> {
      auto rp = self->make_response_promise();
      update_sandbox(self, rp, std::move(cls), set_net, std::move(policy));
      return rp;
    },
    [self](destroy_atom) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      auto& st = self->state;
      st.destroy_waiters.push_back(rp);
      if (st.info.state == sandbox_state::creating) {
        st.destroying = true; // handled when the create job reports back
        return rp;
      }
      begin_destroy(self, "");
      maybe_quit(self);
      return rp;
    },
    // The TTL counts running time; a paused sandbox has paused_ttl_s
    // (actors/sandbox_ttl.hpp).
    [self](ttl_atom, uint64_t gen) {
      auto why = ttl_due(self, gen);
      if (why.empty())
        return;
      apply_policy(self, why == "ttl expired" ? timeout_due(self)
                                              : policy_action{policy_action::destroy, why});
    },
    // Its idle policy (actors/sandbox_idle.hpp).
    [self](idle_atom, int64_t cpu_idle_since_ms) {
      apply_policy(self, idle_due(self, cpu_idle_since_ms));
    },
    [self](died_atom, std::string& reason) { on_died(self, reason); },
    // Processes: background execs, the process table, signals (sandbox_procs.cpp).
    [self](bgexec_atom, exec_request& req) -> caf::result<background_process> {
      auto rp = self->make_response_promise();
      start_background(self, rp, std::move(req));
      return rp;
    },
    [self](bgexec_atom, exec_request& req, bool keep_stdin) -> caf::result<background_process> {
      auto rp = self->make_response_promise();
      start_background(self, rp, std::move(req), keep_stdin);
      return rp;
    },
    [self](stdin_atom, int32_t pid, std::string& data, bool close) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      send_stdin(self, rp, pid, std::move(data), close);
      return rp;
    },
    [self](procs_atom) -> caf::result<std::vector<process_info>> {
      auto rp = self->make_response_promise();
      list_processes(self, rp);
      return rp;
    },
    [self](proc_atom, int32_t pid, int64_t wait_ms) -> caf::result<background_process> {
      auto rp = self->make_response_promise();
      get_process(self, rp, pid, wait_ms);
      return rp;
    },
    [self](signal_atom, int32_t pid, int32_t signo, bool group) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      signal_process(self, rp, pid, signo, group);
      return rp;
    },
    [self](pwait_atom, int32_t pid, uint64_t waiter) { wait_expired(self, pid, waiter); },
    // A sample of CPU (since the previous one, kept by this row) and memory
    // (actors/sandbox_metrics.hpp).
    [self, prev = std::make_shared<cpu_mark>()](sbmetrics_atom) -> caf::result<sandbox_metric> {
      auto rp = self->make_response_promise();
      sample_metrics(self, rp, prev);
      return rp;
    },
    // -- push streams (issue 24 part 2): sandbox_procs.hpp, sandbox_watch.hpp.
    [self](follow_atom, int32_t pid, caf::actor& sink,
           uint64_t token) -> caf::result<background_process> {
      auto rp = self->make_response_promise();
      follow_process(self, rp, pid, std::move(sink), token);
      return rp;
    },
    [self](watch_atom, std::string& path, bool recursive, caf::actor& sink,
           uint64_t token) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      watch_dir(self, rp, std::move(path), recursive, std::move(sink), token);
      return rp;
    },
    // -- end push streams
    // -- terminals (issue 26 part 1): sandbox_pty.hpp.
    [self](ptyopen_atom, exec_request& req, int32_t cols,
           int32_t rows) -> caf::result<background_process> {
      auto rp = self->make_response_promise();
      open_pty(self, rp, std::move(req), cols, rows);
      return rp;
    },
    [self](ptywrite_atom, int32_t pid, std::string& data) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      write_pty(self, rp, pid, std::move(data));
      return rp;
    },
    [self](ptysize_atom, int32_t pid, int32_t cols, int32_t rows) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      resize_pty(self, rp, pid, cols, rows);
      return rp;
    },
    // -- shell sessions (issue 26 part 2): sandbox_session.hpp.
    [self](sopen_atom, std::string& shell, std::string& cwd,
           std::map<std::string, std::string>& env) -> caf::result<session_info> {
      auto rp = self->make_response_promise();
      open_session(self, rp, std::move(shell), std::move(cwd), std::move(env));
      return rp;
    },
    [self](srun_atom, std::string& sid, std::string& cmd,
           double timeout_s) -> caf::result<exec_result> {
      auto rp = self->make_response_promise();
      run_in_session(self, rp, std::move(sid), std::move(cmd), timeout_s);
      return rp;
    },
    [self](sclose_atom, std::string& sid) -> caf::result<bool> {
      auto rp = self->make_response_promise();
      close_session(self, rp, std::move(sid));
      return rp;
    },
    [self](slist_atom) -> caf::result<std::vector<session_info>> {
      return list_sessions(self);
    },
    // -- end shell sessions
    // -- ports (issue 26 part 3): where a port is served (sandbox_ports.hpp).
    [self](port_atom, int32_t port) -> caf::result<port_route> {
      auto rp = self->make_response_promise();
      route_port(self, rp, port);
      return rp;
    },
    [](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace

} // namespace dsec
