// Shell sessions of one sandbox (see sandbox_session.hpp). Backend callbacks
// run on a backend thread and only hand their data to the actor (run_in); a
// session's state is touched in the actor alone.
#include "actors/sandbox_session.hpp"

#include <csignal>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/operations.hpp"
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_trajectory.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/session.hpp"
#include "core/session_inspect.hpp" // shell sessions (issue 26 part 2)

namespace dsec {

namespace {

/// Output a shell prints between runs (a background job's) that the next run
/// answers with; past it the rest is dropped.
constexpr size_t max_carry = 1u << 20;

} // namespace

/// One run (or the opening script) in flight.
struct session_run {
  caf::response_promise rp;
  uint64_t gen = 0;
  bool opening = false;
  bool timed_out = false;
  session_text::marker_cut out, err;
  std::chrono::steady_clock::time_point started;
  std::shared_ptr<trajectory::record> rec;

  session_run(std::string nonce)
    : out(nonce, true), err(nonce, false), started(std::chrono::steady_clock::now()) {}
};

struct shell_session {
  session_info info;
  uint64_t order = 0;
  uint64_t exec_id = 0;
  int32_t pid = 0;
  bool opened = false;
  bool closed = false;
  std::optional<session_run> cur;
  uint64_t next_gen = 0;
  std::string carry_out, carry_err;
};

namespace {

using session_ptr = std::shared_ptr<shell_session>;

std::string where(sandbox_actor_ptr self, const shell_session& s) {
  return "session " + s.info.id + " of sandbox " + self->state.info.id;
}

session_table& table(sandbox_actor_ptr self) {
  auto& st = self->state;
  if (!st.sessions)
    st.sessions = std::make_shared<session_table>();
  return *st.sessions;
}

void append_bounded(std::string& to, std::string&& data) {
  if (to.size() < max_carry)
    to += data.substr(0, max_carry - to.size());
}

/// Answers the opening script: the session is listed from now on.
void finish_open(sandbox_actor_ptr self, const session_ptr& s) {
  auto run = std::move(*s->cur);
  s->cur.reset();
  s->opened = true;
  s->carry_out = run.out.take_rest();
  s->carry_err = run.err.take_rest();
  trajectory::record rec;
  rec.kind = "session_open";
  rec.at_ms = now_ms();
  rec.session = s->info.id;
  if (run.rec) { // its shell, cwd and env, kept at the start
    rec.argv = run.rec->argv;
    rec.cwd = run.rec->cwd;
    rec.env = run.rec->env;
  }
  trajectory_session_note(self, std::move(rec));
  run.rp.deliver(s->info);
  end_op(self);
}

/// Answers the run in flight with `res` (logged first).
void answer_run(sandbox_actor_ptr self, const session_ptr& s, expected<exec_result> res) {
  auto run = std::move(*s->cur);
  s->cur.reset();
  ++s->info.runs;
  if (res)
    res->node_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now()
                                                             - run.started).count();
  if (run.rec)
    return trajectory_exec_done(self, run.rp, run.rec, std::move(res));
  finish_op(self, run.rp, res);
}

/// The run's result from what its streams held, with `status`.
exec_result cut_result(session_run& run, int status) {
  exec_result res;
  res.exit_code = run.timed_out ? 128 + SIGINT : status;
  res.timed_out = run.timed_out;
  res.stdout_data = run.out.take_output();
  res.stderr_data = run.err.take_output();
  res.truncated = run.out.truncated() || run.err.truncated();
  res.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now()
                                                              - run.started).count();
  return res;
}

/// Both markers came: the run (or the opening) is over.
void on_markers(sandbox_actor_ptr self, const session_ptr& s) {
  auto& run = *s->cur;
  if (run.opening)
    return finish_open(self, s);
  int status = run.out.status();
  auto res = cut_result(run, status);
  append_bounded(s->carry_out, run.out.take_rest());
  append_bounded(s->carry_err, run.err.take_rest());
  answer_run(self, s, std::move(res));
}

void on_chunk(sandbox_actor_ptr self, const session_ptr& s, exec_chunk& c) {
  if (c.stream != 1 && c.stream != 2)
    return;
  if (!s->cur) {
    append_bounded(c.stream == 1 ? s->carry_out : s->carry_err, std::move(c.data));
  } else {
    auto& run = *s->cur;
    (c.stream == 1 ? run.out : run.err).feed(c.data);
    if (run.out.done() && run.err.done())
      on_markers(self, s);
  }
}

/// The shell ended (exit inside, killed, or the sandbox went).
void on_shell_end(sandbox_actor_ptr self, const session_ptr& s, expected<exec_result>& res) {
  s->info.alive = false;
  if (s->info.reason.empty())
    s->info.reason = res ? "its shell exited with status " + std::to_string(res->exit_code)
                         : res.err().message;
  if (!s->cur)
    return;
  auto& run = *s->cur;
  if (run.opening) {
    table(self).by_id.erase(s->info.id);
    // init says why on stderr ("dsec-init: exec /bin/zsh: No such file or
    // directory", or chdir's error for a missing cwd).
    auto said = run.err.take_output().substr(0, 512);
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r'))
      said.pop_back();
    error why = !res ? res.err()
                     : invalid_argument("session open in sandbox " + self->state.info.id
                                        + ": shell " + s->info.shell + " could not start"
                                        + (res->exit_code == 127 || res->exit_code == 126
                                             ? " (not in the sandbox, or not executable)"
                                             : "")
                                        + ", exit status " + std::to_string(res->exit_code)
                                        + (said.empty() ? "" : ": " + said));
    auto rp = run.rp;
    s->cur.reset();
    rp.deliver(to_caf(why));
    return end_op(self);
  }
  if (s->closed) {
    auto rp = run.rp;
    s->cur.reset();
    rp.deliver(to_caf(conflict(where(self, *s) + " was closed while this run was going")));
    return end_op(self);
  }
  if (!res)
    return answer_run(self, s, error{res.err().code, where(self, *s) + ": " + res.err().message});
  answer_run(self, s, cut_result(run, res->exit_code));
}

/// Starts the shell's exec; its callbacks feed `s` inside the actor.
uint64_t start_shell(sandbox_actor_ptr self, const session_ptr& s, exec_request req) {
  auto hdl = caf::actor_cast<caf::actor>(self);
  backends::exec_callbacks cb;
  cb.keep_output = false;
  cb.keep_stdin = true;
  cb.unbounded_output = true; // each run is cut and bounded here
  cb.on_started = [hdl, s](int32_t pid) { run_in(hdl, [s, pid] { s->pid = pid; }); };
  cb.on_output = [hdl, self, s](exec_chunk c) {
    run_in(hdl, [self, s, c = std::move(c)]() mutable { on_chunk(self, s, c); });
  };
  cb.on_done = [hdl, self, s](expected<exec_result> res) {
    run_in(hdl, [self, s, res = std::move(res)]() mutable { on_shell_end(self, s, res); });
  };
  return self->state.sb->exec(std::move(req), std::move(cb));
}

/// A run's time is up (round 0) or SIGINT did not end it yet.
void on_run_timeout(sandbox_actor_ptr self, const session_ptr& s, uint64_t gen, int round) {
  if (!s->cur || s->cur->gen != gen || !s->info.alive || !self->state.sb)
    return;
  s->cur->timed_out = true;
  auto grace_rounds = static_cast<int>(ops::session_stop_grace.count() / 1000);
  if (round >= grace_rounds || s->pid <= 0) {
    s->info.reason = "a run did not stop within " + std::to_string(grace_rounds)
                     + " s of SIGINT after its timeout; its shell was killed";
    self->state.sb->cancel(s->exec_id);
    return;
  }
  self->state.sb->signal_process(s->pid, SIGINT, true, [](status) {});
  self->delayed_send(self, std::chrono::seconds(1), cont_atom::value,
                     continuation{[self, s, gen, round] {
                       on_run_timeout(self, s, gen, round + 1);
                     }});
}

/// The session `sid` if it can take a run now; else answers `rp`.
session_ptr runnable(sandbox_actor_ptr self, caf::response_promise& rp, const std::string& sid) {
  auto& tbl = table(self);
  auto it = tbl.by_id.find(sid);
  if (it == tbl.by_id.end() || !it->second->opened) {
    rp.deliver(to_caf(not_found("session " + sid.substr(0, 64) + " of sandbox "
                                + self->state.info.id + ": no such session")));
    return nullptr;
  }
  auto& s = it->second;
  if (!s->info.alive) {
    rp.deliver(to_caf(conflict(where(self, *s) + " has ended (" + s->info.reason
                               + "); open a new session")));
    return nullptr;
  }
  if (s->cur) {
    rp.deliver(to_caf(conflict(where(self, *s)
                               + " is running another command (one run at a time)")));
    return nullptr;
  }
  return s;
}

} // namespace

void open_session(sandbox_actor_ptr self, caf::response_promise rp, std::string shell,
                  std::string cwd, std::map<std::string, std::string> env) {
  auto retry = [self, shell, cwd, env](caf::response_promise rp) {
    open_session(self, std::move(rp), shell, cwd, env);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto& st = self->state;
  auto& tbl = table(self);
  auto live = std::count_if(tbl.by_id.begin(), tbl.by_id.end(),
                            [](auto& kv) { return kv.second->info.alive; });
  if (static_cast<size_t>(live) >= session_text::max_sessions) {
    rp.deliver(to_caf(resource_exhausted(
      "session open in sandbox " + st.info.id + ": it has "
      + std::to_string(session_text::max_sessions) + " sessions, the most one sandbox may hold; "
      "close one first")));
    return;
  }
  auto s = std::make_shared<shell_session>();
  s->order = ++tbl.opened;
  s->info.id = "s" + std::to_string(s->order);
  s->info.shell = shell;
  s->info.created_at_ms = now_ms();
  auto nonce = session_text::new_nonce();
  s->cur.emplace(nonce);
  s->cur->rp = rp;
  s->cur->opening = true;
  exec_request req;
  req.argv = {shell};
  req.cwd = std::move(cwd);
  req.env = std::move(env);
  apply_exec_defaults(st, req);
  req.stdin_data = session_text::open_script(nonce);
  if (st.log) {
    s->cur->rec = std::make_shared<trajectory::record>();
    s->cur->rec->argv = req.argv;
    s->cur->rec->cwd = req.cwd;
    s->cur->rec->env = req.env;
  }
  ++st.inflight;
  tbl.by_id[s->info.id] = s;
  s->exec_id = start_shell(self, s, std::move(req));
}

void run_in_session(sandbox_actor_ptr self, caf::response_promise rp, std::string sid,
                    std::string cmd, double timeout_s) {
  auto retry = [self, sid, cmd, timeout_s](caf::response_promise rp) {
    run_in_session(self, std::move(rp), sid, cmd, timeout_s);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto s = runnable(self, rp, sid);
  if (!s)
    return;
  auto& st = self->state;
  ++st.inflight;
  ++st.ctx->execs_total;
  auto nonce = session_text::new_nonce();
  s->cur.emplace(nonce);
  auto& run = *s->cur;
  run.rp = rp;
  run.gen = ++s->next_gen;
  if (st.log) {
    run.rec = std::make_shared<trajectory::record>();
    run.rec->kind = "session_run";
    run.rec->at_ms = now_ms();
    run.rec->session = s->info.id;
    run.rec->argv = {cmd};
    run.rec->timeout_s = timeout_s;
  }
  // What the shell printed between runs (a background job) comes first.
  run.out.feed(std::exchange(s->carry_out, {}));
  run.err.feed(std::exchange(s->carry_err, {}));
  if (auto sent = st.sb->send_stdin(s->exec_id, session_text::run_script(cmd, nonce), false);
      !sent) {
    s->cur.reset();
    rp.deliver(to_caf(error{errc::conflict, where(self, *s) + ": its shell is gone ("
                                              + sent.err().message + ")"}));
    return end_op(self);
  }
  if (timeout_s > 0) {
    auto gen = run.gen;
    self->delayed_send(self, std::chrono::milliseconds(exec_limit_ms(timeout_s)),
                       cont_atom::value,
                       continuation{[self, s, gen] { on_run_timeout(self, s, gen, 0); }});
  }
}

void close_session(sandbox_actor_ptr self, caf::response_promise rp, std::string sid) {
  if (!ready_for(self, rp, [self, sid](caf::response_promise rp) {
        close_session(self, std::move(rp), sid);
      }))
    return;
  auto& st = self->state;
  auto& tbl = table(self);
  auto it = tbl.by_id.find(sid);
  if (it == tbl.by_id.end() || !it->second->opened) {
    rp.deliver(to_caf(not_found("session " + sid.substr(0, 64) + " of sandbox " + st.info.id
                                + ": no such session")));
    return;
  }
  auto s = it->second;
  tbl.by_id.erase(it);
  s->closed = true;
  if (s->info.alive && st.sb) {
    s->info.reason = "closed";
    st.sb->cancel(s->exec_id);
  }
  trajectory::record rec;
  rec.kind = "session_close";
  rec.at_ms = now_ms();
  rec.session = s->info.id;
  trajectory_session_note(self, std::move(rec));
  rp.deliver(true);
}

std::vector<session_info> list_sessions(sandbox_actor_ptr self) {
  std::vector<std::pair<uint64_t, session_info>> all;
  for (auto& [id, s] : table(self).by_id)
    if (s->opened)
      all.emplace_back(s->order, s->info);
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<session_info> out;
  for (auto& [order, info] : all)
    out.push_back(std::move(info));
  return out;
}

} // namespace dsec
