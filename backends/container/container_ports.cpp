// A port inside a container (issue 26 part 3): the node makes a TCP socket
// in the sandbox's network namespace and connects it to 127.0.0.1:port
// there. The socket belongs to that namespace for its whole life, so a
// sandbox with `network: none` is reachable on its loopback and still has
// no route out: nothing is added to its namespace, and the node's own
// socket is not in the sandbox's cgroup, so its eBPF allow-list never sees
// it. Only socket(2) needs the namespace: the calling thread enters it,
// makes the socket and goes back at once.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "backends/container/container_sandbox.hpp"

namespace dsec::backends {

namespace {

/// A TCP socket made in the network namespace `ns_fd`; the calling thread
/// is back in its own namespace when this returns.
expected<sys::unique_fd> socket_in(int ns_fd, const std::string& what) {
  sys::unique_fd self_ns{::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)};
  if (!self_ns)
    return sys_error("open", "/proc/thread-self/ns/net", errno);
  // SAFETY: setns(CLONE_NEWNET) changes only this thread's namespace; the
  // socket below is the only thing made there, and the thread returns to
  // self_ns before anything else runs on it.
  if (::setns(ns_fd, CLONE_NEWNET) != 0)
    return sys_error("setns", what, errno);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int socket_errno = errno;
  if (::setns(self_ns.get(), CLONE_NEWNET) != 0)
    std::abort(); // a thread stuck in a sandbox's namespace must not go on
  if (fd < 0)
    return sys_error("socket", what, socket_errno);
  return sys::unique_fd{fd};
}

} // namespace

expected<sys::unique_fd> container_sandbox::open_port(uint16_t port) {
  auto what = "port " + std::to_string(port) + " of sandbox " + parts_.id;
  if (!root_fd())
    return unavailable(what + ": the sandbox is being destroyed");
  auto ns_path = "/proc/" + std::to_string(parts_.pid) + "/ns/net";
  sys::unique_fd ns{::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!ns)
    return unavailable(what + ": open " + ns_path + ": " + std::strerror(errno));
  auto sock = socket_in(ns.get(), what);
  if (!sock)
    return sock.err();
  int one = 1;
  ::setsockopt(sock->get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(sock->get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      && errno != EINPROGRESS) {
    if (errno == ECONNREFUSED)
      return error{errc::unavailable, what + ": nothing listens there (connection refused)"};
    return sys_error("connect", what, errno);
  }
  return std::move(*sock);
}

} // namespace dsec::backends
