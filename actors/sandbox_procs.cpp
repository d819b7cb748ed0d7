// Background execs, the process table and signals of one sandbox (see
// sandbox_procs.hpp). Backend callbacks run on a backend thread and only
// hand their results to the actor (run_in); a result that arrives after the
// actor quit is dropped with it.
//
// A background command's output is pushed, never polled (the follow row):
// the actor is its one producer and sends each chunk to every follower's
// sink as it arrives; a follower that comes late first gets what was kept,
// in the order it was printed.
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_procs.hpp"
#include "actors/sandbox_pty.hpp"

#include <algorithm>
#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/sandbox_watch.hpp"
#include "actors/interfaces.hpp"
#include "actors/sandbox_trajectory.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

int64_t unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

/// Largest chunk a late follower's catch-up is cut into.
constexpr size_t max_replay_chunk = 256u << 10;

/// The record as a follow answers it: status only, the output went to the sink.
background_process without_output(const background_process& p) {
  auto out = p;
  out.result.stdout_data.clear();
  out.result.stderr_data.clear();
  return out;
}

/// Sends `sink` everything `e` kept, in the order it was printed.
void replay(const background_entry& e, const caf::actor& sink, uint64_t token) {
  size_t off[2] = {0, 0};
  for (auto& [stream, n] : e.runs) {
    auto& data = stream != 2 ? e.proc.result.stdout_data : e.proc.result.stderr_data;
    auto& o = off[stream != 2 ? 0 : 1];
    for (size_t left = n; left > 0 && o < data.size();) {
      auto k = std::min({left, max_replay_chunk, data.size() - o});
      caf::anon_send(sink, stream_atom::value, token, exec_chunk{stream, data.substr(o, k)});
      o += k;
      left -= k;
    }
  }
}

/// Answers and drops every follower of `e` (it ended, or gave way).
void answer_followers(background_entry& e) {
  for (auto& f : e.followers)
    f.rp.deliver(without_output(e.proc));
  e.followers.clear();
}

/// Where one background start stands, shared by its callbacks.
struct launch {
  caf::response_promise rp;
  std::vector<std::string> argv;
  int64_t started_at_ms = 0;
  int32_t pid = 0; // 0 until init reported it
  uint64_t exec_id = 0;
  /// Its trajectory record (null: no log), appended once it started.
  std::shared_ptr<trajectory::record> rec;
  /// A terminal (sandbox_pty.hpp).
  bool pty = false;
};

void on_started(sandbox_actor_ptr self, launch& l, int32_t pid) {
  auto& st = self->state;
  l.pid = pid;
  // A finished record under a reused pid gives way to the new command.
  if (auto old = st.background.find(pid); old != st.background.end()) {
    for (auto& [id, w] : old->second.waiters)
      w.deliver(old->second.proc);
    answer_followers(old->second);
    st.background.erase(old);
    for (auto it = st.finished.begin(); it != st.finished.end(); ++it)
      if (*it == pid) {
        st.finished.erase(it);
        break;
      }
  }
  auto& e = st.background[pid];
  e.proc.pid = pid;
  e.proc.argv = l.argv;
  e.proc.started_at_ms = l.started_at_ms;
  e.proc.running = true;
  e.exec_id = l.exec_id;
  e.pty = l.pty;
  trajectory_background_started(self, std::move(l.rec), pid);
  l.rp.deliver(e.proc);
}

/// The node's output budget is full (core/output_budget.hpp): `stream`
/// lost `lost` bytes at its front (its marker counted); its runs follow.
void forget_front(background_entry& e, int32_t stream, int64_t lost) {
  auto same = [stream](const std::pair<int32_t, size_t>& run) {
    return (run.first == 1) == (stream == 1);
  };
  auto it = std::find_if(e.runs.begin(), e.runs.end(), same);
  if (lost < 0) { // only the marker grew: it belongs to the first run
    if (it != e.runs.end())
      it->second += size_t(-lost);
    return;
  }
  for (auto n = size_t(lost); n > 0 && it != e.runs.end();) {
    auto k = std::min(n, it->second);
    it->second -= k;
    n -= k;
    it = it->second == 0 ? e.runs.erase(it) : it;
    it = std::find_if(it, e.runs.end(), same);
  }
}

void on_output(sandbox_actor_ptr self, const launch& l, exec_chunk& c) {
  auto it = self->state.background.find(l.pid);
  if (l.pid == 0 || it == self->state.background.end() || !it->second.proc.running)
    return;
  // The backend already bounds each stream (16 MiB, then `truncated`).
  auto& e = it->second;
  auto& r = e.proc.result;
  if (e.pty)
    return pty_output(e, c);
  auto& kept = c.stream == 1 ? r.stdout_data : r.stderr_data;
  auto& ks = e.streams[c.stream == 1 ? 0 : 1];
  if (auto lost = ks.append(kept, c.data, e.charge); lost != 0)
    forget_front(e, c.stream, lost);
  r.truncated = r.truncated || ks.dropped > 0;
  if (!e.runs.empty() && e.runs.back().first == c.stream)
    e.runs.back().second += c.data.size();
  else
    e.runs.emplace_back(c.stream, c.data.size());
  for (auto& f : e.followers)
    caf::anon_send(f.sink, stream_atom::value, f.token, c);
}

void on_done(sandbox_actor_ptr self, launch& l, expected<exec_result>& res) {
  auto& st = self->state;
  if (l.pid == 0) { // never started: the exec failed, or init cannot tell pids
    l.rp.deliver(to_caf(res ? internal_error("background exec in " + st.info.id
                                             + ": this sandbox's init does not report pids "
                                               "(recreate the sandbox)")
                            : res.err()));
    return;
  }
  auto it = st.background.find(l.pid);
  if (it == st.background.end() || !it->second.proc.running)
    return;
  auto& e = it->second;
  e.proc.running = false;
  if (res) { // its output came through on_output (keep_output is off)
    auto& r = e.proc.result;
    r.exit_code = res->exit_code;
    r.timed_out = res->timed_out;
    r.truncated = res->truncated || e.streams[0].dropped + e.streams[1].dropped > 0;
    r.duration_ms = res->duration_ms;
  } else {
    e.proc.result.exit_code = -1;
    exec_chunk why{2, "\ndsec: " + res.err().message + "\n"};
    e.proc.result.stderr_data += why.data;
    e.runs.emplace_back(2, why.data.size());
    for (auto& f : e.followers) // it is part of the output they follow
      caf::anon_send(f.sink, stream_atom::value, f.token, why);
  }
  if (!e.pty) // a terminal's keystrokes are not in the log: neither is it
    trajectory_background_ended(self, l.pid, e.proc.result);
  for (auto& [id, w] : e.waiters)
    w.deliver(e.proc);
  e.waiters.clear();
  answer_followers(e);
  st.finished.push_back(l.pid);
  size_t kept = 0;
  for (auto pid : st.finished) {
    auto& r = st.background[pid].proc.result;
    kept += r.stdout_data.size() + r.stderr_data.size();
  }
  while (st.finished.size() > max_finished_background
         || (st.finished.size() > 1 && kept > max_finished_output)) {
    auto& r = st.background[st.finished.front()].proc.result;
    kept -= r.stdout_data.size() + r.stderr_data.size();
    st.background.erase(st.finished.front());
    st.finished.pop_front();
  }
}

} // namespace

void start_background(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
                      bool keep_stdin, uint16_t pty_cols, uint16_t pty_rows) {
  auto retry = [self, req, keep_stdin, pty_cols, pty_rows](caf::response_promise rp) {
    start_background(self, rp, req, keep_stdin, pty_cols, pty_rows);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto& st = self->state;
  ++st.ctx->execs_total;
  auto l = std::make_shared<launch>();
  l->rp = rp;
  l->argv = req.argv;
  l->started_at_ms = unix_ms();
  apply_exec_defaults(st, req);
  l->pty = pty_cols != 0;
  if (!l->pty)
    l->rec = trajectory_begin(self, req);
  auto hdl = caf::actor_cast<caf::actor>(self);
  backends::exec_callbacks cb;
  cb.keep_output = false; // kept here, as it comes
  cb.keep_stdin = keep_stdin;
  cb.pty_cols = pty_cols;
  cb.pty_rows = pty_rows;
  cb.on_started = [hdl, self, l](int32_t pid) {
    run_in(hdl, [self, l, pid] { on_started(self, *l, pid); });
  };
  cb.on_output = [hdl, self, l](exec_chunk c) {
    run_in(hdl, [self, l, c = std::move(c)]() mutable { on_output(self, *l, c); });
  };
  cb.on_done = [hdl, self, l](expected<exec_result> res) {
    run_in(hdl, [self, l, res = std::move(res)]() mutable { on_done(self, *l, res); });
  };
  // The continuations run later, in this actor: the id is set before them.
  l->exec_id = st.sb->exec(std::move(req), std::move(cb));
}

void send_stdin(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                std::string data, bool close) {
  auto retry = [self, pid, data, close](caf::response_promise rp) {
    send_stdin(self, rp, pid, data, close);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto& st = self->state;
  auto it = st.background.find(pid);
  if (it == st.background.end() || !it->second.proc.running)
    return rp.deliver(to_caf(not_found("stdin of process " + std::to_string(pid) + " in "
                                       + st.info.id + ": no such running background command")));
  auto res = st.sb->send_stdin(it->second.exec_id, data, close);
  if (res)
    rp.deliver(true);
  else
    rp.deliver(to_caf(res.err()));
}

void list_processes(sandbox_actor_ptr self, caf::response_promise rp) {
  if (!ready_for(self, rp, [self](caf::response_promise rp) { list_processes(self, rp); }))
    return;
  auto hdl = caf::actor_cast<caf::actor>(self);
  self->state.sb->processes([hdl, self, rp](expected<std::vector<process_info>> res) mutable {
    run_in(hdl, [self, rp, res = std::move(res)]() mutable {
      if (!res)
        return rp.deliver(to_caf(res.err()));
      for (auto& p : *res) {
        auto it = self->state.background.find(p.pid);
        p.background = it != self->state.background.end() && it->second.proc.running;
      }
      rp.deliver(std::move(*res));
    });
  });
}

void get_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                 int64_t wait_ms) {
  auto& st = self->state;
  auto retry = [self, pid, wait_ms](caf::response_promise rp) {
    get_process(self, rp, pid, wait_ms);
  };
  auto it = st.background.find(pid);
  if (it != st.background.end()) {
    auto& e = it->second;
    // A record is read as it stands, even while paused; waiting for a frozen
    // process to end resumes its sandbox first.
    if (!e.proc.running || wait_ms <= 0 || st.destroying)
      return rp.deliver(e.proc);
    if (!ready_for(self, rp, retry))
      return;
    auto id = ++st.next_waiter;
    e.waiters.emplace(id, rp);
    self->delayed_send(self, std::chrono::milliseconds(wait_ms), pwait_atom::value, pid, id);
    return;
  }
  if (!ready_for(self, rp, retry))
    return;
  auto what = "process " + std::to_string(pid) + " in sandbox " + st.info.id;
  auto hdl = caf::actor_cast<caf::actor>(self);
  st.sb->processes([hdl, rp, pid, what](expected<std::vector<process_info>> res) mutable {
    run_in(hdl, [rp, pid, what, res = std::move(res)]() mutable {
      if (!res)
        return rp.deliver(to_caf(res.err()));
      for (auto& p : *res)
        if (p.pid == pid) {
          background_process out;
          out.pid = pid;
          out.argv = p.argv;
          out.started_at_ms = p.started_at_ms;
          out.running = true;
          return rp.deliver(std::move(out));
        }
      rp.deliver(to_caf(not_found(what + ": no such process")));
    });
  });
}

void fail_waiters(sandbox_actor_ptr self, const error& why) {
  for (auto& [pid, e] : self->state.background) {
    for (auto& [id, w] : e.waiters)
      w.deliver(to_caf(why));
    e.waiters.clear();
    for (auto& f : e.followers)
      f.rp.deliver(to_caf(why));
    e.followers.clear();
  }
  end_watches(self, why);
}

void follow_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                    caf::actor sink, uint64_t token) {
  auto& st = self->state;
  auto what = "follow process " + std::to_string(pid) + " in sandbox " + st.info.id;
  if (!sink)
    return rp.deliver(to_caf(invalid_argument(what + ": no sink to send its output to")));
  auto it = st.background.find(pid);
  if (it == st.background.end())
    return rp.deliver(to_caf(not_found(what + ": no background command with that pid (only "
                                              "commands started in the background keep their "
                                              "output)")));
  auto& e = it->second;
  caf::anon_send(sink, stream_atom::value, token, exec_chunk{subscribed_stream, {}});
  replay(e, sink, token); // what it missed, before anything live
  if (!e.proc.running)
    return rp.deliver(without_output(e.proc));
  if (st.destroying) // its end is not reported any more
    return rp.deliver(to_caf(not_running(st)));
  self->monitor(sink);
  e.followers.push_back({std::move(sink), token, rp});
}

void on_sink_down(sandbox_actor_ptr self, const caf::actor_addr& sink) {
  for (auto& [pid, e] : self->state.background) {
    auto& fs = e.followers;
    for (auto it = fs.begin(); it != fs.end();) {
      if (it->sink.address() == sink) {
        it->rp.deliver(without_output(e.proc));
        it = fs.erase(it);
      } else {
        ++it;
      }
    }
  }
  stop_watches_of(self, sink);
}

void wait_expired(sandbox_actor_ptr self, int32_t pid, uint64_t waiter) {
  auto it = self->state.background.find(pid);
  if (it == self->state.background.end())
    return;
  auto w = it->second.waiters.find(waiter);
  if (w == it->second.waiters.end())
    return;
  w->second.deliver(it->second.proc);
  it->second.waiters.erase(w);
}

void signal_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                    int32_t signo, bool group) {
  auto retry = [self, pid, signo, group](caf::response_promise rp) {
    signal_process(self, rp, pid, signo, group);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto hdl = caf::actor_cast<caf::actor>(self);
  self->state.sb->signal_process(pid, signo, group, [hdl, rp](status res) mutable {
    run_in(hdl, [rp, res = std::move(res)]() mutable {
      if (res)
        rp.deliver(true);
      else
        rp.deliver(to_caf(res.err()));
    });
  });
}

} // namespace dsec
