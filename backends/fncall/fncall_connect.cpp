// Connecting to a fork server (see fncall_connect.hpp).
#include "backends/fncall/fncall_connect.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>

#include "backends/fncall/fncall_wire.hpp"
#include "sys/fs.hpp"

namespace dsec::backends::fncall {

expected<sys::unique_fd> connect_fork_server(int init_pid, const char* path,
                                             std::chrono::steady_clock::time_point until,
                                             const std::atomic<bool>& server_gone) {
  using clock = std::chrono::steady_clock;
  // openat2 resolves the path as if the sandbox's root were "/"; the O_PATH
  // fd is then connected via /proc/self/fd.
  auto root_path = "/proc/" + std::to_string(init_pid) + "/root";
  sys::unique_fd root{::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (!root)
    return sys_error("open", root_path, errno);
  sys::unique_fd path_fd;
  while (true) {
    path_fd.reset(sys::open_in_root(root.get(), path + 1, O_PATH));
    if (path_fd)
      break;
    if (errno != ENOENT)
      return sys_error("open", path, errno);
    if (server_gone.load())
      return internal_error("the fork server exited before listening");
    if (clock::now() > until)
      return error{errc::timeout, "the fork server did not listen in time"};
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  sys::unique_fd sock{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!sock)
    return sys_error("socket", "AF_UNIX", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d", path_fd.get());
  while (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    // The socket file exists between bind and listen: retry briefly.
    if (errno != ECONNREFUSED || clock::now() > until)
      return sys_error("connect", path, errno);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // The server answers "ready" once it has unlinked its socket.
  std::string in;
  char buf[256];
  while (frame_size(in) == 0) {
    pollfd pfd{sock.get(), POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()).count();
    if (left <= 0)
      return error{errc::timeout, "the fork server did not get ready in time"};
    if (::poll(&pfd, 1, int(left)) <= 0)
      continue;
    auto n = ::recv(sock.get(), buf, sizeof buf, 0);
    if (n <= 0)
      return internal_error("the fork server closed the connection while starting");
    in.append(buf, static_cast<size_t>(n));
  }
  if (!is_ready_frame(in.substr(0, frame_size(in))))
    return internal_error("the fork server sent no ready frame");
  return sock;
}

} // namespace dsec::backends::fncall
