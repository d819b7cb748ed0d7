// dsec-init's side of the node's connection (see loop_state.hpp and
// backends/channel/protocol.hpp): the blocking handshake (`config` in, the
// sandbox set up, `ready` or `failed` out), then frames both ways on a
// non-blocking socket; the first the node sends on each connection is
// `hello`, answered with the protocol versions init speaks. A frame init cannot parse, or one it does not know,
// drops the connection: a broken peer. A new connection on the listening
// socket replaces the old one, so a restarted node can reconnect; the old
// connection's jobs then finish silently.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "backends/init/loop_state.hpp"
#include "backends/init/procs.hpp"
#include "backends/init/setup.hpp"
#include "backends/init/spawn.hpp"

namespace dsec::init {

namespace proto = init_proto;
using proto::msg;

void drop_connection() {
  close_ports(); // streams belong to the connection that opened them
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

namespace {

void handle_frame(const proto::header& h, std::string_view body) {
  if (h.type == msg::exec) {
    proto::exec_msg m;
    if (!proto::decode(body, m)) {
      drop_connection();
      return;
    }
    start_exec(h.id, std::move(m));
  } else if (h.type == msg::kill) {
    cancel_exec(h.id);
  } else if (h.type == msg::stdin_data) {
    proto::reader r(body);
    auto data = r.str();
    bool eof = r.u8() != 0;
    if (!r.done()) {
      drop_connection();
      return;
    }
    feed_stdin(h.id, data, eof);
  } else if (h.type == msg::ps && body.empty()) {
    send_frame(proto::encode_ps(h.id, list_processes()));
  } else if (h.type == msg::cpu_query && body.empty()) {
    send_frame(proto::writer(msg::cpu_time, h.id).u64(busy_cpu_ns()).finish());
  } else if (h.type == msg::hello) {
    // The node decides whether the versions meet (protocol.hpp agree());
    // init only says what it speaks.
    proto::hello_msg node;
    if (!proto::decode(body, node)) {
      drop_connection();
      return;
    }
    send_frame(proto::encode(proto::hello_msg{}));
  } else if (h.type == msg::signal) {
    proto::signal_msg m;
    if (!proto::decode(body, m)) {
      drop_connection();
      return;
    }
    int e = signal_process(m);
    send_frame(proto::writer(msg::signal_done, h.id).i32(e).finish());
  } else if (h.type == msg::pty_open) {
    proto::pty_size size;
    proto::exec_msg m;
    if (!proto::decode_pty_open(body, size, m)) {
      drop_connection();
      return;
    }
    start_pty(h.id, std::move(m), size);
  } else if (h.type == msg::pty_resize) {
    proto::pty_size size;
    if (!proto::decode_pty_resize(body, size)) {
      drop_connection();
      return;
    }
    resize_pty(h.id, size);
  } else if (proto::is_port_frame(h.type)) {
    port_frame(h, body); // ports.cpp
  } else {
    drop_connection(); // unknown or out-of-order frame: a broken peer
  }
}

} // namespace

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
    err = setup_namespaces(cfg);
  // Best effort: root here lacks CAP_SYS_RESOURCE on some hosts (EACCES).
  if (int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    oom_protected = ::write(fd, "-1000", 5) == 5;
    ::close(fd);
  }
  if (err.empty())
    err = drop_privileges(cfg.seccomp_bpf);
  std::string frame = err.empty() ? proto::writer(msg::ready, 0).finish()
                                  : proto::writer(msg::failed, 0).str(err).finish();
  if (::send(S.ctl, frame.data(), frame.size(), MSG_NOSIGNAL) != ssize_t(frame.size()))
    return false;
  return err.empty();
}

} // namespace dsec::init
