// dsec-init: PID 1 of a container sandbox. The node starts it (from a sealed
// memfd) with a listening unix socket as fd 3; init accepts the node's
// connection, reads `config`, sets the sandbox up on itself (setup.cpp),
// drops every privilege and answers `ready`. Then one epoll loop: exec
// requests start children (spawn.cpp: own session, default signals,
// oom_score_adj 0, pipes for stdio), output streams back as `output` frames
// (at most 16 MiB per stream, then `truncated`), the end
// as `done`; zombies of any origin are reaped; timeouts kill the process
// group. A command's pid is sent (`started`) before its output. Pipes that
// something still holds when an exec is done (a server started with `&`) are
// drained and discarded, never closed: closing them would kill the holder
// with SIGPIPE at its next write. `ps` reads the sandbox's /proc and `signal`
// signals one process or group for the node (procs.cpp). A new connection on the listening socket replaces the old one, so a
// restarted node can reconnect. Nothing of init is inherited by children:
// every descriptor is CLOEXEC and init is not dumpable (its /proc entries are
// closed to the agent).
//
// Exec failures inside the child (cwd missing, command not found) follow the
// shell convention: a message on stderr and exit code 127 (126 if the command
// is not executable), not a protocol error.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/channel/protocol.hpp"
#include "backends/init/guest.hpp"
#include "backends/init/procs.hpp"
#include "backends/init/setup.hpp"
#include "backends/init/spawn.hpp"

namespace proto = dsec::init_proto;
using proto::msg;

namespace {

constexpr int listen_fd = 3;
// After the command exits, how long init waits for its pipes to reach EOF
// (a background grandchild may keep them open). Too short loses late output;
// too long delays `done` of commands that leave daemons behind.
constexpr int64_t pipe_grace_ms = 200;

enum kind : uint64_t { k_listen = 1, k_ctl, k_signal, k_stdin, k_stdout, k_stderr, k_drain };

// Most pipes of finished execs drained at once. Each costs init one fd; past
// it the oldest is closed (its holder then sees EPIPE at its next write, as
// if init had never drained it). Far above what agents leave running.
constexpr size_t max_drains = 1024;

uint64_t key(kind k, uint32_t id) { return (uint64_t(id) << 8) | k; }

int64_t now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

double now_ms_f() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

// Jobs are keyed by a slot number of init's own; `req` is the node's id,
// unique per connection only: a reconnected node starts counting again, and
// the old connection's jobs finish silently (`gen` tells them apart).
struct job {
  uint32_t req = 0, gen = 0;
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string stdin_data;
  size_t stdin_off = 0;
  size_t sent[2] = {0, 0};
  double start = 0, end = 0;
  int64_t deadline = 0; // timeout, 0 = none
  int64_t grace = 0;    // pipe EOF wait after exit
  bool exited = false, timed_out = false, truncated = false;
  int status = 0;
  // keep_stdin: stdin stays open for stdin_data frames until one says close
  // (stdin_eof); in_watched: `in` is in the epoll set for EPOLLOUT.
  bool keep_stdin = false, stdin_eof = false, in_watched = false;
};

struct state {
  int ep = -1;
  int ctl = -1;
  int sig = -1;
  std::string ibuf, obuf;
  std::map<uint32_t, job> jobs;
  std::map<pid_t, uint32_t> by_pid;
  uint32_t gen = 0, next_slot = 0;
  /// Pipes of finished execs still held by something in the sandbox.
  std::map<uint32_t, int> drains;
  uint32_t next_drain = 0;
};

state S;

void ep_add(int fd, uint32_t events, uint64_t k) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = k;
  ::epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev);
}

void ep_mod(int fd, uint32_t events, uint64_t k) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = k;
  ::epoll_ctl(S.ep, EPOLL_CTL_MOD, fd, &ev);
}

void close_fd(int& fd) {
  if (fd >= 0) {
    ::epoll_ctl(S.ep, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    fd = -1;
  }
}

void drop_connection() {
  close_fd(S.ctl);
  S.ibuf.clear();
  S.obuf.clear();
}

void flush() {
  while (S.ctl >= 0 && !S.obuf.empty()) {
    auto n = ::send(S.ctl, S.obuf.data(), S.obuf.size(), MSG_NOSIGNAL);
    if (n > 0) {
      S.obuf.erase(0, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      ep_mod(S.ctl, EPOLLIN | EPOLLOUT, key(k_ctl, 0));
      return;
    }
    drop_connection(); // peer gone: frames for it are lost
    return;
  }
  if (S.ctl >= 0)
    ep_mod(S.ctl, EPOLLIN, key(k_ctl, 0));
}

void send_frame(std::string frame) {
  if (S.ctl < 0)
    return;
  S.obuf += frame;
  flush();
}

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

void write_stdin(uint32_t id);

job* find_req(uint32_t req) {
  for (auto& [slot, j] : S.jobs)
    if (j.req == req && j.gen == S.gen)
      return &j;
  return nullptr;
}

void start_exec(uint32_t req, proto::exec_msg m) {
  if (find_req(req)) {
    send_frame(proto::writer(msg::exec_failed, req).str("duplicate request id").finish());
    return;
  }
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (!make_pipe(in, false) || !make_pipe(out, true) || !make_pipe(err, true)) {
    int e = errno;
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0)
        ::close(fd);
    send_frame(proto::writer(msg::exec_failed, req)
                 .str(dsec::init::errno_message("pipe", "exec", e)).finish());
    return;
  }
  auto argv = cstrs(m.argv);
  auto envp = cstrs(m.env);
  double start = now_ms_f();
  const char* cwd = m.cwd.empty() ? "/" : m.cwd.c_str();
  dsec::init::spawn_args args{in[0], out[1], err[1], cwd, argv.data(), envp.data()};
  pid_t pid = dsec::init::spawn(args);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    int e = errno;
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    send_frame(proto::writer(msg::exec_failed, req)
                 .str(dsec::init::errno_message("clone", m.argv[0], e)).finish());
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
    size_t keep = std::min(size_t(n), proto::max_output - sent);
    if (keep < size_t(n))
      j.truncated = true;
    sent += keep;
    if (keep > 0 && j.gen == S.gen)
      send_frame(proto::writer(msg::output, j.req).u8(uint8_t(stream))
                   .str(std::string_view(buf, keep)).finish());
  }
}

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
    if (it == S.by_pid.end())
      continue; // an orphan that was reparented to us
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

void handle_frame(const proto::header& h, std::string_view body) {
  if (h.type == msg::exec) {
    proto::exec_msg m;
    if (!proto::decode(body, m)) {
      drop_connection();
      return;
    }
    start_exec(h.id, std::move(m));
  } else if (h.type == msg::kill) {
    job* j = find_req(h.id);
    if (j && !j->exited)
      ::kill(-j->pid, SIGKILL);
  } else if (h.type == msg::stdin_data) {
    proto::reader r(body);
    auto data = r.str();
    bool eof = r.u8() != 0;
    if (!r.done()) {
      drop_connection();
      return;
    }
    uint32_t slot = 0;
    for (auto& [s, j] : S.jobs)
      if (j.req == h.id && j.gen == S.gen)
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
  } else if (h.type == msg::ps && body.empty()) {
    send_frame(proto::encode_ps(h.id, dsec::init::list_processes()));
  } else if (h.type == msg::signal) {
    proto::signal_msg m;
    if (!proto::decode(body, m)) {
      drop_connection();
      return;
    }
    int e = dsec::init::signal_process(m);
    send_frame(proto::writer(msg::signal_done, h.id).i32(e).finish());
  } else {
    drop_connection(); // unknown or out-of-order frame: a broken peer
  }
}

void read_ctl() {
  char buf[65536];
  for (;;) {
    auto n = ::recv(S.ctl, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) {
      drop_connection();
      return;
    }
    S.ibuf.append(buf, size_t(n));
  }
  size_t off = 0;
  proto::header h;
  for (;;) {
    std::string_view rest(S.ibuf.data() + off, S.ibuf.size() - off);
    auto p = proto::peek_frame(rest, h);
    if (p == proto::parse::incomplete)
      break;
    if (p == proto::parse::invalid) {
      drop_connection();
      return;
    }
    handle_frame(h, rest.substr(proto::header_size, h.length));
    if (S.ctl < 0)
      return;
    off += proto::header_size + h.length;
  }
  S.ibuf.erase(0, off);
}

void accept_new() {
  int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c < 0)
    return;
  drop_connection(); // the newest node connection wins
  ++S.gen;
  S.ctl = c;
  ep_add(c, EPOLLIN, key(k_ctl, 0));
}

void check_deadlines() {
  int64_t now = now_ms();
  std::vector<uint32_t> grace_over;
  for (auto& [id, j] : S.jobs) {
    if (!j.exited && j.deadline && now >= j.deadline && !j.timed_out) {
      j.timed_out = true;
      ::kill(-j.pid, SIGKILL);
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

void dispatch(uint64_t k, uint32_t events) {
  auto id = uint32_t(k >> 8);
  switch (kind(k & 0xff)) {
  case k_listen: accept_new(); break;
  case k_signal: reap(); break;
  case k_ctl:
    if (events & EPOLLOUT)
      flush();
    if (S.ctl >= 0 && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
      read_ctl();
    break;
  case k_stdin: write_stdin(id); break;
  case k_stdout: read_output(id, 1); break;
  case k_stderr: read_output(id, 2); break;
  case k_drain: drain(id); break;
  }
}

[[noreturn]] void run_loop() {
  epoll_event evs[64];
  for (;;) {
    int n = ::epoll_wait(S.ep, evs, 64, next_timeout());
    for (int i = 0; i < n; ++i)
      dispatch(evs[i].data.u64, evs[i].events);
    check_deadlines();
  }
}

// Blocking handshake: accept, read `config`, set up, answer.
bool bootstrap() {
  S.ctl = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (S.ctl < 0)
    return false;
  proto::header h;
  char buf[4096];
  while (proto::peek_frame(S.ibuf, h) == proto::parse::incomplete) {
    auto n = ::recv(S.ctl, buf, sizeof(buf), 0);
    if (n <= 0)
      return false;
    S.ibuf.append(buf, size_t(n));
  }
  proto::config_msg cfg;
  std::string err;
  if (h.type != msg::config || !proto::decode(std::string_view(S.ibuf).substr(proto::header_size, h.length), cfg))
    err = "config: malformed frame";
  S.ibuf.erase(0, proto::header_size + h.length);
  // Refuse a program of the wrong shape before touching anything.
  if (const char* why = err.empty() ? proto::filter_shape_error(cfg.seccomp_bpf) : nullptr)
    err = std::string("seccomp filter: ") + why;
  if (err.empty())
    err = dsec::init::setup_namespaces(cfg);
  // Best effort: root here lacks CAP_SYS_RESOURCE on some hosts (EACCES).
  if (int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    dsec::init::oom_protected = ::write(fd, "-1000", 5) == 5;
    ::close(fd);
  }
  if (err.empty())
    err = dsec::init::drop_privileges(cfg.seccomp_bpf);
  std::string frame = err.empty() ? proto::writer(msg::ready, 0).finish()
                                  : proto::writer(msg::failed, 0).str(err).finish();
  if (::send(S.ctl, frame.data(), frame.size(), MSG_NOSIGNAL) != ssize_t(frame.size()))
    return false;
  return err.empty();
}

} // namespace

int main() {
  dsec::init::guest_boot(); // VM guests only: builds the root, returns in a child
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
  // The root's mounts from the node (if any): never inherited by a child.
  // root_view_fd stays open for good (a restarted node takes it back).
  ::fcntl(proto::root_mount_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(proto::root_view_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(proto::sysfs_tree_fd, F_SETFD, FD_CLOEXEC); // closed during setup
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr); // the node cloned us with all blocked
  ::signal(SIGPIPE, SIG_IGN);
  if (!bootstrap())
    return 1;
  ::fcntl(S.ctl, F_SETFL, O_NONBLOCK);
  S.ep = ::epoll_create1(EPOLL_CLOEXEC);
  S.sig = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  ::fcntl(listen_fd, F_SETFL, O_NONBLOCK);
  ep_add(listen_fd, EPOLLIN, key(k_listen, 0));
  ep_add(S.sig, EPOLLIN, key(k_signal, 0));
  ep_add(S.ctl, EPOLLIN, key(k_ctl, 0));
  if (!S.ibuf.empty()) // exec frames that arrived with the config
    read_ctl();
  reap();
  run_loop();
}
