// Exec jobs of dsec-init (see loop_state.hpp): a child per exec request
// (spawn.cpp), its stdin written as the pipe takes it, its output forwarded
// as `output` frames (at most max_output per stream, then `truncated`), its
// end as `done` once it exited and its pipes reached EOF or the grace ran
// out. Pipes that something still holds when an exec is done (a server
// started with `&`) are drained and discarded, never closed: closing them
// would kill the holder with SIGPIPE at its next write.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "backends/init/exec_user.hpp"
#include "backends/init/procs.hpp"
#include "backends/init/loop_state.hpp"
#include "backends/init/setup.hpp"
#include "backends/init/spawn.hpp"

namespace dsec::init {

namespace proto = init_proto;
using proto::msg;

/// A small file's text ("" if it cannot be read): /etc/passwd and /etc/group
/// of the sandbox. Bounded, so a huge file cannot bloat init.
std::string read_small_file(const char* path) {
  constexpr size_t max_bytes = 4u << 20;
  std::string out;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return out;
  char buf[8192];
  for (;;) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || out.size() + size_t(n) > max_bytes)
      break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

namespace {

// After the command exits, how long init waits for its pipes to reach EOF
// (a background grandchild may keep them open). Too short loses late output;
// too long delays `done` of commands that leave daemons behind.
constexpr int64_t pipe_grace_ms = 200;

// Most pipes of finished execs drained at once. Each costs init one fd; past
// it the oldest is closed (its holder then sees EPIPE at its next write, as
// if init had never drained it). Far above what agents leave running.
constexpr size_t max_drains = 1024;

/// Keeps reading (and discarding) a finished exec's pipe until its last
/// holder closes it.
void keep_draining(int& fd) {
  if (fd < 0)
    return;
  if (S.drains.size() >= max_drains) {
    auto oldest = S.drains.begin();
    close_fd(oldest->second);
    S.drains.erase(oldest);
  }
  uint32_t id = ++S.next_drain;
  ::epoll_ctl(S.ep, EPOLL_CTL_DEL, fd, nullptr);
  S.drains[id] = fd;
  ep_add(fd, EPOLLIN, key(k_drain, id));
  fd = -1;
}

void finish(uint32_t id) {
  auto it = S.jobs.find(id);
  if (it == S.jobs.end())
    return;
  job& j = it->second;
  close_fd(j.in);
  keep_draining(j.out);
  keep_draining(j.err);
  proto::done_msg d;
  if (WIFEXITED(j.status))
    d.exit_code = WEXITSTATUS(j.status);
  else if (WIFSIGNALED(j.status))
    d.exit_code = 128 + WTERMSIG(j.status);
  d.timed_out = j.timed_out;
  d.truncated = j.truncated;
  d.duration_ms = j.end - j.start;
  if (j.gen == S.gen)
    send_frame(proto::encode(j.req, d));
  S.jobs.erase(it);
}

job* find_job(uint32_t id) {
  auto it = S.jobs.find(id);
  return it == S.jobs.end() ? nullptr : &it->second;
}

void maybe_finish(uint32_t id) {
  job* jp = find_job(id);
  if (!jp || !jp->exited)
    return;
  job& j = *jp;
  if (j.out < 0 && j.err < 0)
    finish(id);
  else if (j.grace == 0)
    j.grace = now_ms() + pipe_grace_ms;
}

bool make_pipe(int p[2], bool parent_reads) {
  if (::pipe2(p, O_CLOEXEC) != 0)
    return false;
  ::fcntl(p[parent_reads ? 0 : 1], F_SETFL, O_NONBLOCK);
  return true;
}

std::vector<char*> cstrs(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

job* find_req(uint32_t req) {
  for (auto& [slot, j] : S.jobs)
    if (j.req == req && j.gen == S.gen)
      return &j;
  return nullptr;
}

} // namespace

void drain(uint32_t id) {
  auto it = S.drains.find(id);
  if (it == S.drains.end())
    return;
  static char buf[proto::max_chunk];
  for (int round = 0; round < 16; ++round) {
    auto n = ::read(it->second, buf, sizeof(buf));
    if (n > 0)
      continue;
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    close_fd(it->second); // EOF: the last holder is gone
    S.drains.erase(it);
    return;
  }
}

void start_exec(uint32_t req, proto::exec_msg m) {
  if (find_req(req)) {
    send_frame(proto::writer(msg::exec_failed, req).str("duplicate request id").finish());
    return;
  }
  // The user, looked up in this sandbox's own files (init's root is the
  // sandbox's), before any pipe exists: a refusal leaves nothing to undo.
  exec_identity who;
  if (!m.user.empty()) {
    auto why = resolve_exec_user(m.user, read_small_file("/etc/passwd"),
                                 read_small_file("/etc/group"), who);
    if (!why.empty()) {
      send_frame(proto::writer(msg::exec_refused, req).str("user \"" + m.user + "\": " + why)
                   .finish());
      return;
    }
    // HOME follows the user unless the request set another (the node's
    // default is root's).
    if (who.uid != 0 && !who.home.empty())
      for (auto& e : m.env)
        if (e == "HOME=/root")
          e = "HOME=" + who.home;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (!make_pipe(in, false) || !make_pipe(out, true) || !make_pipe(err, true)) {
    int e = errno;
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0)
        ::close(fd);
    send_frame(proto::writer(msg::exec_failed, req)
                 .str(errno_message("pipe", "exec", e)).finish());
    return;
  }
  auto argv = cstrs(m.argv);
  auto envp = cstrs(m.env);
  double start = now_ms_f();
  const char* cwd = m.cwd.empty() ? "/" : m.cwd.c_str();
  spawn_args args{in[0], out[1], err[1], cwd, argv.data(), envp.data()};
  if (!m.user.empty()) {
    args.set_ids = true;
    args.uid = who.uid;
    args.gid = who.gid;
    args.groups = who.groups.data();
    args.ngroups = who.groups.size();
  }
  pid_t pid = spawn(args);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    int e = errno;
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    send_frame(proto::writer(msg::exec_failed, req)
                 .str(errno_message("clone", m.argv[0], e)).finish());
    return;
  }
  uint32_t id = ++S.next_slot;
  job& j = S.jobs[id];
  j.req = req;
  j.gen = S.gen;
  j.pid = pid;
  j.in = in[1];
  j.out = out[0];
  j.err = err[0];
  j.start = start;
  j.stdin_data = std::move(m.stdin_data);
  j.keep_stdin = m.keep_stdin != 0;
  j.unbounded = m.unbounded_output != 0;
  if (m.timeout_ms)
    j.deadline = now_ms() + int64_t(m.timeout_ms);
  S.by_pid[pid] = id;
  if (j.gen == S.gen) // before any output, which epoll reports later
    send_frame(proto::writer(msg::started, req).i32(int32_t(pid)).finish());
  ep_add(j.out, EPOLLIN, key(k_stdout, id));
  ep_add(j.err, EPOLLIN, key(k_stderr, id));
  if (j.stdin_data.empty() && !j.keep_stdin)
    close_fd(j.in);
  else if (!j.stdin_data.empty()) {
    ep_add(j.in, EPOLLOUT, key(k_stdin, id));
    j.in_watched = true;
    write_stdin(id);
  }
}

void write_stdin(uint32_t id) {
  job* jp = find_job(id);
  if (!jp)
    return;
  job& j = *jp;
  while (j.in >= 0 && j.stdin_off < j.stdin_data.size()) {
    auto n = ::write(j.in, j.stdin_data.data() + j.stdin_off, j.stdin_data.size() - j.stdin_off);
    if (n > 0)
      j.stdin_off += size_t(n);
    else if (n < 0 && errno == EINTR)
      continue;
    else if (n < 0 && errno == EAGAIN)
      return;
    else
      break; // EPIPE: the command does not read its stdin
  }
  if (j.keep_stdin && !j.stdin_eof && j.in >= 0 && j.stdin_off >= j.stdin_data.size()) {
    // Drained; wait for more (level-triggered epoll would spin on EPOLLOUT).
    if (j.in_watched)
      ::epoll_ctl(S.ep, EPOLL_CTL_DEL, j.in, nullptr);
    j.in_watched = false;
    j.stdin_data.clear();
    j.stdin_off = 0;
    return;
  }
  close_fd(j.in);
  std::string().swap(j.stdin_data);
}

namespace {

/// Forwards what is readable on one of the job's pipes now, up to `rounds`
/// chunks; closes the pipe at EOF.
void pump(job& j, int stream, int rounds) {
  int& fd = stream == 1 ? j.out : j.err;
  static char buf[proto::max_chunk];
  for (int round = 0; round < rounds && fd >= 0; ++round) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) {
      close_fd(fd);
      break;
    }
    size_t& sent = j.sent[stream - 1];
    size_t keep = (j.pty || j.unbounded) ? size_t(n) : std::min(size_t(n), proto::max_output - sent);
    if (keep < size_t(n))
      j.truncated = true;
    sent += keep;
    if (keep > 0 && j.gen == S.gen)
      send_frame(proto::writer(msg::output, j.req).u8(uint8_t(stream))
                   .str(std::string_view(buf, keep)).finish());
  }
}

} // namespace

void read_output(uint32_t id, int stream) {
  job* jp = find_job(id);
  if (!jp)
    return;
  pump(*jp, stream, 16);
  maybe_finish(id);
}

void reap() {
  signalfd_siginfo si;
  while (::read(S.sig, &si, sizeof(si)) > 0) {
  }
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0)
      return;
    auto it = S.by_pid.find(pid);
    if (it == S.by_pid.end()) {
      sudo_reaped(pid, st); // a sudo command (sudo.cpp), or an orphan reparented to us
      continue;
    }
    uint32_t id = it->second;
    S.by_pid.erase(it);
    job* jp = find_job(id);
    if (!jp)
      continue;
    job& j = *jp;
    j.exited = true;
    j.status = st;
    j.end = now_ms_f();
    maybe_finish(id);
  }
}

void cancel_exec(uint32_t req) {
  job* j = find_req(req);
  if (j && !j->exited)
    kill_as_owner(j->pid, SIGKILL, true); // procs.hpp: also a command of another user
}

void feed_stdin(uint32_t req, std::string_view data, bool eof) {
  uint32_t slot = 0;
  for (auto& [s, j] : S.jobs)
    if (j.req == req && j.gen == S.gen)
      slot = s;
  job* j = slot ? find_job(slot) : nullptr;
  // A job that ended, never kept stdin, or closed it: the bytes go nowhere.
  if (!j || !j->keep_stdin || j->in < 0 || j->stdin_eof)
    return;
  if (j->stdin_data.size() - j->stdin_off + data.size() > proto::max_body)
    return; // the command is not reading: drop, as a full pipe would block
  j->stdin_data.append(data);
  j->stdin_eof = eof;
  if (!j->in_watched && j->stdin_off < j->stdin_data.size()) {
    ep_add(j->in, EPOLLOUT, key(k_stdin, slot));
    j->in_watched = true;
  }
  write_stdin(slot);
}

void check_deadlines() {
  int64_t now = now_ms();
  std::vector<uint32_t> grace_over;
  for (auto& [id, j] : S.jobs) {
    if (!j.exited && j.deadline && now >= j.deadline && !j.timed_out) {
      j.timed_out = true;
      kill_as_owner(j.pid, SIGKILL, true);
    }
    if (j.exited && j.grace && now >= j.grace)
      grace_over.push_back(id);
  }
  // A starved init can reach the grace deadline with output still in the
  // pipes (epoll has not reported it yet): take what is there before `done`.
  for (auto id : grace_over) {
    if (job* j = find_job(id)) {
      pump(*j, 1, 64);
      pump(*j, 2, 64);
    }
    finish(id);
  }
}

int next_timeout() {
  int64_t next = -1;
  for (auto& [id, j] : S.jobs) {
    int64_t d = j.exited ? j.grace : (j.timed_out ? 0 : j.deadline);
    if (d && (next < 0 || d < next))
      next = d;
  }
  if (next < 0)
    return -1;
  int64_t left = next - now_ms();
  return left < 0 ? 0 : int(left);
}

} // namespace dsec::init
