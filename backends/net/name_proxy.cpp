// The node's SNI/Host check for named rules (see name_proxy.hpp).
#include "backends/net/name_proxy.hpp"

#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/sni.hpp"

namespace dsec::net {

namespace {

// How long a client has to send its hello / request head.
constexpr int hello_timeout_ms = 10000;
constexpr size_t max_hello = 16384 + 5;

// Copies both ways until both sides are done.
void splice_both(int a, int b) {
  std::vector<uint8_t> buf(65536);
  bool a_open = true, b_open = true;
  while (a_open || b_open) {
    pollfd fds[2] = {{a, short(a_open ? POLLIN : 0), 0}, {b, short(b_open ? POLLIN : 0), 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      int from = i == 0 ? a : b, to = i == 0 ? b : a;
      bool& open = i == 0 ? a_open : b_open;
      if (!open || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) {
        open = false;
        ::shutdown(to, SHUT_WR);
        if (n < 0)
          return;
        continue;
      }
      if (!write_all(to, buf.data(), size_t(n)))
        return;
    }
  }
}

} // namespace

expected<std::unique_ptr<name_proxy>> name_proxy::start(uint32_t addr, name_gate* gate) {
  std::unique_ptr<name_proxy> p{new name_proxy()};
  p->gate_ = gate;
  p->listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (p->listen_ < 0 || !p->loop_.ok())
    return unavailable(std::string{"name proxy: socket: "} + strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr;
  socklen_t sl = sizeof(sa);
  if (::bind(p->listen_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0
      || ::listen(p->listen_, 256) != 0
      || ::getsockname(p->listen_, reinterpret_cast<sockaddr*>(&sa), &sl) != 0)
    return unavailable(std::string{"name proxy: bind/listen: "} + strerror(errno));
  p->port_ = ntohs(sa.sin_port);
  p->loop_.start([raw = p.get()] { raw->accept_loop(); });
  return p;
}

name_proxy::counters& name_proxy::node_counters() {
  static counters all;
  return all;
}

name_proxy::~name_proxy() {
  loop_.stop(); // no new connections
  conns_.stop();
  if (listen_ >= 0)
    ::close(listen_);
}

void name_proxy::accept_loop() {
  while (!loop_.stopping()) {
    conns_.reap();
    pollfd fds[2] = {{listen_, POLLIN, 0}, {loop_.wake_fd(), POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR)
      return;
    if (loop_.stopping())
      return;
    if (!(fds[0].revents & POLLIN))
      continue;
    int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0)
      continue;
    if (!conns_.spawn(c, [this](conn_threads::conn& cn) { serve(cn); }))
      ++stats_.closed;
  }
}

void name_proxy::serve(conn_threads::conn& c) {
  int fd = c.client;
  sockaddr_in peer{}, orig{};
  socklen_t pl = sizeof(peer), ol = sizeof(orig);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0
      || ::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &ol) != 0) {
    ++stats_.closed;
    return;
  }
  uint32_t src = peer.sin_addr.s_addr;
  addr16 dst = v4_mapped(orig.sin_addr.s_addr);
  uint16_t port = ntohs(orig.sin_port);
  auto route = gate_->route(src, dst, port);
  if (route == name_gate::verdict::unknown) {
    ++stats_.closed;
    return;
  }
  std::vector<uint8_t> head;
  if (route == name_gate::verdict::check) {
    ++stats_.checked;
    first_bytes_name got;
    head.resize(max_hello);
    size_t have = 0;
    while (got.r == first_bytes_name::result::need_more && have < head.size()) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, hello_timeout_ms) <= 0)
        break;
      ssize_t n = ::recv(fd, head.data() + have, head.size() - have, 0);
      if (n <= 0)
        break;
      have += size_t(n);
      got = port == 443 ? tls_server_name(head.data(), have) : http_host(head.data(), have);
    }
    head.resize(have);
    std::string name =
      got.r == first_bytes_name::result::found ? got.name : std::string{};
    if (!gate_->allow_name(src, dst, port, name)) {
      ++stats_.closed;
      return;
    }
  } else {
    ++stats_.passed;
  }
  int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (up < 0)
    return;
  c.other = up; // shut down with the client on stop, closed after serve()
  timeval tv{10, 0};
  ::setsockopt(up, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(up, reinterpret_cast<sockaddr*>(&orig), sizeof(orig)) != 0)
    return;
  timeval none{0, 0};
  ::setsockopt(up, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
  if (!head.empty() && !write_all(up, head.data(), head.size()))
    return;
  splice_both(fd, up);
}

} // namespace dsec::net
