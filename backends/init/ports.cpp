// Port streams of dsec-init (issue 26 part 3): the node reaches a TCP port
// inside a VM guest, which has no network device, through this init. For a
// port_open frame init connects to 127.0.0.1:port from inside (so the
// sandbox gains no network of its own), then relays bytes: port_data frames
// from the node are written to the socket, what the socket reads goes back
// as port_data, and each direction's end is a port_close. Streams belong to
// the node connection that opened them and close with it. A stream opened
// with a window (protocol version 3) is flow controlled: init stops reading
// the socket while `window` bytes it sent are unacknowledged, and
// acknowledges (port_ack) the node's bytes as the socket takes them.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <map>

#include "backends/init/loop_state.hpp"

namespace dsec::init {

namespace {

namespace proto = init_proto;
using proto::msg;

struct stream {
  int fd = -1;
  std::string out;         ///< from the node, not yet written
  bool connecting = true;
  bool node_done = false;  ///< the node's direction ended (port_close 0)
  bool sock_done = false;  ///< the socket's direction ended (we sent port_close)
  uint32_t window = 0;     ///< 0: not flow controlled (a node before version 3)
  uint64_t in_flight = 0;  ///< bytes sent to the node and not yet acknowledged
};

bool may_read(const stream& s) { return s.window == 0 || s.in_flight < s.window; }

std::map<uint32_t, stream> streams;

void watch(uint32_t id, stream& s) {
  uint32_t ev = 0;
  if (!s.sock_done && !s.connecting && may_read(s))
    ev |= EPOLLIN;
  if (s.connecting || !s.out.empty())
    ev |= EPOLLOUT;
  if (!may_read(s))
    ev |= EPOLLET; // a hang-up while waiting for an ack is reported once, not in a loop
  ep_mod(s.fd, ev, key(k_port, id));
}

void drop(uint32_t id) {
  auto it = streams.find(id);
  if (it == streams.end())
    return;
  close_fd(it->second.fd);
  streams.erase(it);
}

/// Ends stream `id` with `err` (sent to the node) and forgets it.
void abort_stream(uint32_t id, int err) {
  send_frame(proto::writer(msg::port_close, id).i32(err).finish());
  drop(id);
}

void finish_if_done(uint32_t id, stream& s) {
  if (s.node_done && s.sock_done && s.out.empty())
    drop(id);
}

/// Writes what the socket takes of the node's bytes.
void write_out(uint32_t id, stream& s) {
  uint64_t wrote = 0;
  while (!s.out.empty()) {
    auto n = ::send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      s.out.erase(0, size_t(n));
      wrote += uint64_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    return abort_stream(id, n < 0 ? errno : EPIPE);
  }
  if (wrote > 0 && s.window != 0)
    send_frame(proto::writer(msg::port_ack, id).u32(uint32_t(wrote)).finish());
  if (s.out.empty() && s.node_done)
    ::shutdown(s.fd, SHUT_WR);
  watch(id, s);
  finish_if_done(id, s);
}

void open_stream(uint32_t id, uint32_t port, uint32_t window) {
  if (streams.count(id) || port == 0 || port > 65535)
    return abort_stream(id, EINVAL);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return abort_stream(id, errno);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      && errno != EINPROGRESS) {
    int err = errno;
    ::close(fd);
    return abort_stream(id, err);
  }
  auto& s = streams[id];
  s.fd = fd;
  s.window = window;
  ep_add(fd, EPOLLOUT, key(k_port, id));
}

} // namespace

void port_frame(const proto::header& h, std::string_view body) {
  proto::reader r(body);
  if (h.type == msg::port_open) {
    auto port = r.u32();
    if (r.done())
      return open_stream(h.id, port, 0);
    auto window = r.u32(); // version 3
    if (r.done())
      open_stream(h.id, port, window == 0 ? 1 : window);
    return;
  }
  auto it = streams.find(h.id);
  if (h.type == msg::port_ack) {
    auto n = r.u32();
    if (!r.done() || it == streams.end())
      return;
    auto& s = it->second;
    s.in_flight -= std::min<uint64_t>(s.in_flight, n);
    if (!s.connecting)
      watch(h.id, s);
    return;
  }
  if (h.type == msg::port_data) {
    auto data = r.str();
    if (!r.done() || it == streams.end() || it->second.node_done)
      return; // a stream already gone: its bytes have nowhere to go
    it->second.out.append(data.data(), data.size());
    if (!it->second.connecting)
      write_out(h.id, it->second);
    return;
  }
  if (h.type == msg::port_close) {
    auto err = r.i32();
    if (!r.done() || it == streams.end())
      return;
    if (err != 0)
      return drop(h.id);
    it->second.node_done = true;
    if (!it->second.connecting)
      write_out(h.id, it->second);
  }
}

void port_event(uint32_t id, uint32_t events) {
  auto it = streams.find(id);
  if (it == streams.end())
    return;
  auto& s = it->second;
  if (s.connecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
    if (err != 0)
      return abort_stream(id, err);
    s.connecting = false;
    send_frame(proto::writer(msg::port_opened, id).finish());
    return write_out(id, s);
  }
  if (events & EPOLLOUT)
    return write_out(id, s);
  if (s.sock_done) { // only a hang-up can come now: the socket is gone both ways
    if (events & (EPOLLHUP | EPOLLERR)) {
      if (s.node_done)
        return drop(id);
      return abort_stream(id, EPIPE);
    }
    return;
  }
  if (!may_read(s))
    return; // read again once the node acknowledged (port_ack)
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    char buf[65536];
    size_t want = s.window == 0 ? sizeof(buf)
                                : std::min<uint64_t>(sizeof(buf), s.window - s.in_flight);
    auto n = ::recv(s.fd, buf, want, 0);
    if (n > 0) {
      send_frame(proto::writer(msg::port_data, id).str(std::string_view(buf, size_t(n))).finish());
      s.in_flight += uint64_t(n);
      if (!may_read(s))
        watch(id, s); // the node's reader is behind: wait for its ack
      return;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      return;
    if (n < 0)
      return abort_stream(id, errno);
    s.sock_done = true; // EOF: the service finished its answer
    send_frame(proto::writer(msg::port_close, id).i32(0).finish());
    watch(id, s);
    finish_if_done(id, s);
  }
}

void close_ports() {
  for (auto& [id, s] : streams)
    close_fd(s.fd);
  streams.clear();
}

} // namespace dsec::init
