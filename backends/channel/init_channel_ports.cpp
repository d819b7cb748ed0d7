// Port streams over the control channel (issue 26 part 3): the node's side
// of backends/init/ports.cpp. open_port() hands the caller one end of a
// socket pair and keeps the other on the io_loop: what the caller writes
// goes to init as port_data frames, init's port_data is written back, and
// each direction's end travels as port_close. A guest has no network
// device, so this is how a node reaches a service inside it; the service
// sees a connection from 127.0.0.1 inside the guest. With an init of
// protocol version 3 a stream is flow controlled both ways (protocol.hpp,
// port_ack): the node stops reading the caller's socket while a window of
// bytes is unacknowledged by init, and acknowledges init's bytes as the
// caller's socket takes them, so a slow reader holds at most a window here.
#include "backends/channel/channel_sandbox.hpp"
#include "backends/channel/init_channel.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dsec::backends {

namespace proto = init_proto;

namespace {

// (Templates: port_stream is init_channel's private type.)
template <class Stream>
bool may_read(const Stream& s) {
  return s.window == 0 || s.in_flight < s.window;
}

/// The epoll interest of a port stream's socket.
template <class Stream>
uint32_t interest(const Stream& s) {
  uint32_t ev = (s.sent_close || !may_read(s) ? 0u : uint32_t{EPOLLIN})
                | (s.out.empty() ? 0u : uint32_t{EPOLLOUT});
  // Waiting for an ack, a hang-up is reported once, not in a loop.
  return may_read(s) ? ev : ev | uint32_t{EPOLLET};
}

} // namespace

expected<sys::unique_fd> init_channel::open_port(uint16_t port) {
  auto what = "port " + std::to_string(port) + " of sandbox " + parts_.id;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0)
    return sys_error("socketpair", what, errno);
  sys::unique_fd ours{pair[0]}, theirs{pair[1]};
  std::lock_guard<std::mutex> g(m_);
  if (shut_)
    return unavailable(what + ": sandbox destroyed");
  if (dead_ || !channel_open_)
    return unavailable(what + ": " + death_);
  uint32_t id = next_id_++;
  std::weak_ptr<init_channel> weak = shared_from_this();
  auto token = loop_->add(ours.get(), EPOLLIN, [weak, id](uint32_t ev) {
    if (auto self = weak.lock())
      self->on_port_socket(id, ev);
  });
  if (token == 0)
    return sys_error("epoll_ctl", what, errno);
  auto& s = ports_[id];
  s.fd = std::move(ours);
  s.token = token;
  bool was_empty = out_.empty();
  if (version_ >= 3) {
    s.window = proto::port_window;
    out_ += proto::writer(proto::msg::port_open, id).u32(port).u32(s.window).finish();
  } else {
    out_ += proto::writer(proto::msg::port_open, id).u32(port).finish();
  }
  if (was_empty)
    flush_locked();
  return std::move(theirs);
}

void init_channel::on_port_socket(uint32_t id, uint32_t events) {
  std::lock_guard<std::mutex> g(m_);
  auto it = ports_.find(id);
  if (it == ports_.end())
    return;
  auto& s = it->second;
  if (events & EPOLLOUT) {
    port_write_locked(id, s);
    if (ports_.find(id) == ports_.end())
      return;
  }
  if (s.sent_close) { // only a hang-up can come now: the caller closed both ways
    if (events & (EPOLLHUP | EPOLLERR)) {
      bool was_empty = out_.empty();
      out_ += proto::writer(proto::msg::port_close, id).i32(EPIPE).finish();
      drop_port_locked(id);
      if (was_empty)
        flush_locked();
    }
    return;
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || !may_read(s))
    return; // read again once init acknowledged (port_ack)
  char buf[65536];
  size_t want = s.window == 0 ? sizeof(buf)
                              : std::min<uint64_t>(sizeof(buf), s.window - s.in_flight);
  auto n = ::recv(s.fd.get(), buf, want, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  bool was_empty = out_.empty();
  if (n > 0) {
    out_ += proto::writer(proto::msg::port_data, id)
              .str(std::string_view(buf, static_cast<size_t>(n)))
              .finish();
    s.in_flight += static_cast<uint64_t>(n);
    if (!may_read(s))
      loop_->modify(s.token, s.fd.get(), interest(s)); // init's reader is behind
  } else { // the caller is done sending (0) or gone (an errno)
    int err = n < 0 ? errno : 0;
    out_ += proto::writer(proto::msg::port_close, id).i32(err).finish();
    s.sent_close = true;
    if (err != 0 || s.got_close) {
      drop_port_locked(id);
    } else {
      loop_->modify(s.token, s.fd.get(), interest(s));
    }
  }
  if (was_empty)
    flush_locked();
}

bool init_channel::on_port_frame(const proto::header& h, std::string_view body) {
  proto::reader r(body);
  std::lock_guard<std::mutex> g(m_);
  auto it = ports_.find(h.id);
  switch (h.type) {
  case proto::msg::port_opened:
    return r.done();
  case proto::msg::port_ack: {
    auto n = r.u32();
    if (!r.done())
      return false;
    if (it != ports_.end() && !it->second.sent_close) {
      auto& s = it->second;
      s.in_flight -= std::min<uint64_t>(s.in_flight, n);
      loop_->modify(s.token, s.fd.get(), interest(s));
    }
    return true;
  }
  case proto::msg::port_data: {
    auto data = r.str();
    if (!r.done())
      return false;
    if (it != ports_.end() && !it->second.got_close) {
      it->second.out += data;
      port_write_locked(h.id, it->second);
    }
    return true;
  }
  case proto::msg::port_close: {
    auto err = r.i32();
    if (!r.done())
      return false;
    if (it == ports_.end())
      return true;
    if (err != 0) { // refused, reset: the caller sees its socket close unanswered
      drop_port_locked(h.id);
      return true;
    }
    it->second.got_close = true;
    port_write_locked(h.id, it->second);
    return true;
  }
  default:
    return false; // port_open goes the other way
  }
}

void init_channel::port_write_locked(uint32_t id, port_stream& s) {
  uint64_t wrote = 0;
  while (!s.out.empty()) {
    auto n = ::send(s.fd.get(), s.out.data(), s.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      s.out.erase(0, static_cast<size_t>(n));
      wrote += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    // The caller closed its end: tell init to stop.
    bool was_empty = out_.empty();
    out_ += proto::writer(proto::msg::port_close, id).i32(n < 0 ? errno : EPIPE).finish();
    drop_port_locked(id);
    if (was_empty)
      flush_locked();
    return;
  }
  if (wrote > 0 && s.window != 0 && !s.got_close) {
    bool was_empty = out_.empty();
    out_ += proto::writer(proto::msg::port_ack, id).u32(static_cast<uint32_t>(wrote)).finish();
    if (was_empty)
      flush_locked();
  }
  if (s.out.empty() && s.got_close) {
    ::shutdown(s.fd.get(), SHUT_WR); // init's side ended: EOF for the caller
    if (s.sent_close)
      return drop_port_locked(id);
  }
  loop_->modify(s.token, s.fd.get(), interest(s));
}

void init_channel::drop_port_locked(uint32_t id) {
  auto it = ports_.find(id);
  if (it == ports_.end())
    return;
  loop_->remove(it->second.token, it->second.fd.get());
  ports_.erase(it); // closes the node's end: the caller sees EOF
}

expected<sys::unique_fd> channel_sandbox::open_port(uint16_t port) {
  if (!channel_)
    return unavailable("port " + std::to_string(port) + ": the sandbox is not started");
  return channel_->open_port(port);
}

void init_channel::close_ports_locked() {
  for (auto& [id, s] : ports_)
    loop_->remove(s.token, s.fd.get());
  ports_.clear();
}

} // namespace dsec::backends
