// dsec-init's side of `sudo` (sudo_proto.hpp says why and what travels): a
// SOCK_SEQPACKET listener on the sandbox's /dev, only where the sandbox's
// root has the sudo policy file when init starts. Each connection is
// checked at accept (SO_PEERCRED against the policy) before anything is
// read from it; a permitted one sends one request with its three stdio
// descriptors, and init spawns the command exactly as an exec (spawn.cpp:
// own session, the target user's ids, the sandbox's filter and empty
// capabilities, inherited from init). The command's wait status goes back
// when it ends; forwarded signals reach its process group; a client that
// goes away first takes its command with it (SIGKILL to the group), so
// nothing it started is left running on its own.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "backends/init/exec_user.hpp"
#include "backends/init/loop_state.hpp"
#include "backends/init/procs.hpp"
#include "backends/init/setup.hpp"
#include "backends/init/spawn.hpp"
#include "backends/init/sudo_proto.hpp"

namespace dsec::init {

namespace sp = sudo_proto;

namespace {

struct session {
  int fd = -1;
  uid_t peer = 0;
  pid_t child = -1; ///< -1 until the request started a command
};

int listener = -1;
std::map<uint32_t, session> sessions;
std::map<pid_t, uint32_t> by_child;
uint32_t next_session = 0;

/// A root-owned file of the sandbox, read without following it into a FIFO
/// or a device (O_NONBLOCK, regular files only) and bounded: the policy and
/// passwd decide who may sudo.
std::string read_regular(const char* path) {
  constexpr size_t max_bytes = 1u << 20;
  std::string out;
  int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[8192];
    for (;;) {
      auto n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0 || out.size() + size_t(n) > max_bytes)
        break;
      out.append(buf, size_t(n));
    }
  }
  ::close(fd);
  return out;
}

void say(int fd, const std::string& m) {
  (void)::send(fd, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/// Ends session `id`: its command, if it still runs, is killed with its group.
void end_session(uint32_t id) {
  auto it = sessions.find(id);
  if (it == sessions.end())
    return;
  if (it->second.child > 0 && by_child.count(it->second.child))
    kill_as_owner(it->second.child, SIGKILL, true);
  close_fd(it->second.fd);
  sessions.erase(it);
}

/// Starts the command of a request; "" or why not.
std::string start(session& s, uint32_t id, sp::request& r, const int fds[3]) {
  exec_identity who;
  auto spec = r.user.empty() ? std::string{"0"} : r.user;
  auto why = resolve_exec_user(spec, read_small_file("/etc/passwd"),
                               read_small_file("/etc/group"), who);
  if (!why.empty())
    return "user \"" + spec + "\": " + why;
  std::vector<char*> argv, envp;
  for (auto& a : r.argv)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : r.env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  spawn_args a{fds[0], fds[1], fds[2], r.cwd.c_str(), argv.data(), envp.data()};
  a.set_ids = true;
  a.uid = who.uid;
  a.gid = who.gid;
  a.groups = who.groups.data();
  a.ngroups = who.groups.size();
  pid_t pid = spawn(a);
  if (pid < 0)
    return errno_message("clone", r.argv[0], errno);
  s.child = pid;
  by_child[pid] = id;
  return {};
}

/// The request of session `id`: `n` bytes in `buf` with descriptors `fds`.
void on_request(uint32_t id, session& s, std::string_view body, std::vector<int>& fds,
                bool truncated) {
  sp::request r;
  std::string why;
  if (truncated)
    why = "request larger than " + std::to_string(sp::max_request) + " bytes or with too many descriptors";
  else if (fds.size() != 3)
    why = "request carries " + std::to_string(fds.size()) + " descriptors, not stdin, stdout and stderr";
  else
    why = sp::decode(body, r);
  if (why.empty()) {
    int f[3] = {fds[0], fds[1], fds[2]};
    why = start(s, id, r, f);
  }
  for (int fd : fds)
    ::close(fd);
  fds.clear();
  if (!why.empty()) {
    say(s.fd, "Esudo: " + why);
    end_session(id);
  }
}

} // namespace

void sudo_listen() {
  if (::access(sp::sudo_policy_path, F_OK) != 0)
    return; // no policy: this sandbox offers no sudo
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    dprintf(2, "dsec-init: sudo: %s\n", errno_message("socket", "AF_UNIX", errno).c_str());
    return;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sp::sudo_socket_path, sizeof(addr.sun_path) - 1);
  ::unlink(sp::sudo_socket_path);
  // Anyone may connect; who may sudo is decided per connection at accept.
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || ::chmod(sp::sudo_socket_path, 0666) != 0 || ::listen(s, 16) != 0) {
    dprintf(2, "dsec-init: sudo: %s\n", errno_message("listen", sp::sudo_socket_path, errno).c_str());
    ::close(s);
    return;
  }
  listener = s;
  ep_add(listener, EPOLLIN, key(k_sudo_listen, 0));
}

void sudo_accept() {
  for (;;) {
    int c = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0)
      return;
    ucred cr{};
    socklen_t len = sizeof cr;
    std::string why;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
      why = errno_message("getsockopt", "SO_PEERCRED", errno);
    else
      why = sp::refusal(cr.uid, read_regular(sp::sudo_policy_path), read_regular("/etc/passwd"));
    if (why.empty() && sessions.size() >= sp::max_sessions)
      why = std::to_string(sp::max_sessions) + " sudo commands already run in this sandbox";
    if (!why.empty()) {
      say(c, "Esudo: " + why);
      ::close(c);
      continue;
    }
    uint32_t id = ++next_session;
    sessions[id] = session{c, cr.uid, -1};
    ep_add(c, EPOLLIN, key(k_sudo, id));
  }
}

void sudo_event(uint32_t id) {
  auto it = sessions.find(id);
  if (it == sessions.end())
    return;
  session& s = it->second;
  static char buf[sp::max_request + 1];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(4 * sizeof(int))];
  iovec iov{buf, sizeof buf};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  auto n = ::recvmsg(s.fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
  if (n <= 0) { // the client went away (EOF or an error)
    for (int fd : fds)
      ::close(fd);
    end_session(id);
    return;
  }
  if (s.child < 0) {
    bool truncated = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || size_t(n) > sp::max_request;
    on_request(id, s, std::string_view(buf, size_t(n)), fds, truncated);
    return;
  }
  for (int fd : fds) // a signal carries none
    ::close(fd);
  uint32_t signo = 0;
  if (buf[0] == 'S' && user_detail::parse_id(std::string_view(buf + 1, size_t(n) - 1), signo)
      && sp::forwardable(int(signo)) && by_child.count(s.child))
    kill_as_owner(s.child, int(signo), true);
}

bool sudo_reaped(pid_t pid, int status) {
  auto it = by_child.find(pid);
  if (it == by_child.end())
    return false;
  uint32_t id = it->second;
  by_child.erase(it);
  auto s = sessions.find(id);
  if (s != sessions.end()) {
    say(s->second.fd, "X" + std::to_string(status));
    end_session(id);
  }
  return true;
}

} // namespace dsec::init
