// dsec-init: PID 1 of a container sandbox, and the agent of a VM guest
// (guest.cpp builds the guest's root first). The node starts it (from a
// sealed memfd) with a listening unix socket as fd 3; init accepts the
// node's connection, reads `config`, sets the sandbox up on itself
// (setup.cpp), drops every privilege and answers `ready` (connection.cpp).
// Then one epoll loop, here: exec requests start children (jobs.cpp,
// spawn.cpp: own session, default signals, oom_score_adj 0, pipes for
// stdio), output streams back as `output` frames (at most 16 MiB per
// stream, then `truncated`), the end as `done`; zombies of any origin are
// reaped; timeouts kill the process group. A command's pid is sent
// (`started`) before its output. `ps` reads the sandbox's /proc and `signal`
// signals one process or group for the node (procs.cpp). A new connection on
// the listening socket replaces the old one, so a restarted node can
// reconnect. Nothing of init is inherited by children: every descriptor is
// CLOEXEC and init is not dumpable (its /proc entries are closed to the
// agent).
//
// Exec failures inside the child (cwd missing, command not found) follow the
// shell convention: a message on stderr and exit code 127 (126 if the command
// is not executable), not a protocol error.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "backends/init/guest.hpp"
#include "backends/init/loop_state.hpp"

namespace proto = dsec::init_proto;

namespace dsec::init {

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

namespace {

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
  case k_port: port_event(id, events); break;
  case k_sudo_listen: sudo_accept(); break;
  case k_sudo: sudo_event(id); break;
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

} // namespace

} // namespace dsec::init

int main() {
  using namespace dsec::init;
  guest_boot(); // VM guests only: builds the root, returns in a child
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
  sudo_listen(); // issue 27: only where the sandbox has a sudo policy
  if (!S.ibuf.empty()) // exec frames that arrived with the config
    read_ctl();
  reap();
  run_loop();
}
