// One control channel seen from the node: exec requests become `exec`
// frames on the socket (written from the caller's thread, the rest later
// from the io_loop thread when the socket is full); `output` and `done`
// frames come back on the loop thread and drive the callbacks. A readable
// pidfd means init is gone: pending execs fail and on_exit hears why ("oom"
// when the sandbox's memory controller counted an OOM kill).
#include "backends/channel/init_channel.hpp"
#include "backends/channel/pty_proto.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/clock.hpp"

namespace dsec::backends {

namespace proto = init_proto;

namespace {

// Default environment under spec and request env: what a login shell of
// root would have, so busybox, python and friends behave normally.
const std::map<std::string, std::string> default_env = {
  {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
  {"HOME", "/root"},
  {"TERM", "xterm"},
};

expected<std::string> encode_exec(uint32_t id, exec_request& req,
                                  const std::map<std::string, std::string>& spec_env,
                                  bool keep_stdin = false,
                                  const proto::pty_size* pty = nullptr,
                                  bool unbounded_output = false) {
  // A terminal's empty argv asks init for the user's login shell (pty.cpp).
  if (pty ? !req.argv.empty() && req.argv[0].empty() : req.argv.empty() || req.argv[0].empty())
    return invalid_argument("exec: empty argv");
  if (!(req.timeout_s >= 0) || req.timeout_s > 1e9)
    return invalid_argument("exec: timeout_s must be >= 0");
  if (req.stdin_data.size() > proto::max_body / 2)
    return too_large("exec: stdin larger than " + std::to_string(proto::max_body / 2) + " bytes");
  std::map<std::string, std::string> env = default_env;
  const std::map<std::string, std::string>* layers[] = {&spec_env, &req.env};
  for (auto* src : layers)
    for (auto& [k, v] : *src) {
      if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
        return invalid_argument("exec: bad environment name \"" + k + "\"");
      env[k] = v;
    }
  proto::exec_msg m;
  m.argv = std::move(req.argv);
  for (auto& [k, v] : env)
    m.env.push_back(k + "=" + v);
  m.cwd = std::move(req.cwd);
  m.user = std::move(req.user);
  m.stdin_data = std::move(req.stdin_data);
  m.timeout_ms = static_cast<uint64_t>(exec_limit_ms(req.timeout_s));
  m.keep_stdin = keep_stdin ? 1 : 0;
  m.unbounded_output = unbounded_output ? 1 : 0;
  auto frame = pty ? proto::encode_pty_open(id, *pty, m) : proto::encode(id, m);
  if (frame.size() - proto::header_size > proto::max_body)
    return too_large("exec: request larger than the channel's frame limit");
  return frame;
}

// How long start() waits for init's hello. Init answers from its loop at
// once; a guest just restored under TCG may take seconds to run again.
// Longer than that, init is stuck and the create or recover fails.
constexpr int hello_timeout_ms = 30000;

enum class hello_outcome { answered, closed, init_gone, timed_out, malformed };

/// Sends our hello on `ctl` and waits for init's, which it takes out of
/// `in`; frames before it (a running exec's output after a node restart)
/// stay in `in` for the loop. Blocking, with poll: `ctl` is non-blocking.
hello_outcome exchange_hello(int ctl, int pidfd, std::string& in, proto::hello_msg& init) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(hello_timeout_ms);
  auto left_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(
           deadline - std::chrono::steady_clock::now()).count()));
  };
  auto out = proto::encode(proto::hello_msg{});
  size_t sent = 0;
  while (sent < out.size()) {
    auto n = ::send(ctl, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN)
      return hello_outcome::closed;
    pollfd pfd{ctl, POLLOUT, 0};
    if (left_ms() == 0)
      return hello_outcome::timed_out;
    ::poll(&pfd, 1, left_ms());
  }
  char buf[65536];
  for (;;) {
    size_t off = 0;
    proto::header h;
    while (proto::peek_frame(std::string_view(in).substr(off), h) == proto::parse::complete) {
      if (h.type == proto::msg::hello) {
        bool ok = proto::decode(std::string_view(in).substr(off + proto::header_size, h.length),
                                init);
        in.erase(off, proto::header_size + h.length);
        return ok ? hello_outcome::answered : hello_outcome::malformed;
      }
      off += proto::header_size + h.length;
    }
    if (proto::peek_frame(std::string_view(in).substr(off), h) == proto::parse::invalid)
      return hello_outcome::malformed;
    int wait = left_ms();
    if (wait == 0)
      return hello_outcome::timed_out;
    pollfd fds[2] = {{ctl, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int n = ::poll(fds, 2, wait);
    if (n < 0 && errno != EINTR)
      return hello_outcome::closed;
    if (n <= 0)
      continue;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto got = ::recv(ctl, buf, sizeof buf, MSG_DONTWAIT);
      if (got > 0) {
        in.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      // Closed: an init that died, or one of version 1 refusing hello.
      pollfd gone{pidfd, POLLIN, 0};
      return ::poll(&gone, 1, 0) == 1 ? hello_outcome::init_gone : hello_outcome::closed;
    }
    if (fds[1].revents & POLLIN)
      return hello_outcome::init_gone;
  }
}

} // namespace

init_channel::init_channel(std::shared_ptr<io_loop> loop, channel_parts parts)
  : loop_(std::move(loop)), parts_(std::move(parts)) {}

init_channel::~init_channel() {
  // The loop's handlers hold weak references only; nothing runs after this.
  loop_->remove(ctl_token_, parts_.ctl.get());
  loop_->remove(pid_token_, parts_.pidfd.get());
  loop_->remove(oom_token_, oom_.fd.get());
  // Dropped without destroy() (the sandbox lives on): every on_done still
  // runs exactly once, on the loop thread.
  if (!pending_.empty() || !queries_.empty())
    loop_->post([todo = std::move(pending_), queries = std::move(queries_), id = parts_.id] {
      auto err = unavailable("exec in " + id + ": sandbox handle released");
      for (auto& [n, p] : todo)
        if (p->cb.on_done)
          p->cb.on_done(err);
      for (auto& [n, fn] : queries)
        fn(nullptr, {}, &err);
    });
}

status init_channel::greet() {
  proto::hello_msg ours, theirs;
  auto what = "protocol hello with init of " + parts_.id;
  switch (exchange_hello(parts_.ctl.get(), parts_.pidfd.get(), in_, theirs)) {
  case hello_outcome::answered:
    break;
  case hello_outcome::closed: {
    // Version 1 closes the connection at a frame it does not know.
    theirs = proto::hello_msg{1, 1};
    if (!proto::agree(ours, theirs))
      return internal_error(what + ": " + proto::mismatch_text(ours, theirs));
    if (!parts_.reconnect)
      return internal_error(what + ": init closed the channel at hello (" +
                            proto::mismatch_text(ours, theirs) +
                            ", and this channel cannot reconnect)");
    auto fd = parts_.reconnect();
    if (!fd)
      return error{fd.err().code, what + ": reconnect after hello: " + fd.err().message};
    parts_.ctl = std::move(*fd);
    ::fcntl(parts_.ctl.get(), F_SETFL, O_NONBLOCK);
    in_.clear();
    break;
  }
  case hello_outcome::init_gone:
    return internal_error(what + ": init exited");
  case hello_outcome::timed_out:
    return error{errc::timeout, what + ": no answer within " + std::to_string(hello_timeout_ms) +
                                  " ms"};
  case hello_outcome::malformed:
    return internal_error(what + ": malformed answer");
  }
  auto v = proto::agree(ours, theirs);
  if (v == 0)
    return internal_error(what + ": " + proto::mismatch_text(ours, theirs));
  std::lock_guard<std::mutex> g(m_);
  version_ = v;
  return {};
}

uint32_t init_channel::protocol_version() const {
  std::lock_guard<std::mutex> g(m_);
  return version_;
}

status init_channel::start(oom_watch oom) {
  std::weak_ptr<init_channel> weak = shared_from_this();
  ::fcntl(parts_.ctl.get(), F_SETFL, O_NONBLOCK);
  if (parts_.await_hello) {
    if (auto st = greet(); !st)
      return st;
  }
  std::lock_guard<std::mutex> g(m_);
  if (!parts_.await_hello) {
    // Answered on the loop thread (handle_frame), whenever init runs again.
    hello_pending_ = true;
    out_ += proto::encode(proto::hello_msg{});
  }
  ctl_token_ = loop_->add(parts_.ctl.get(), EPOLLIN, [weak](uint32_t ev) {
    if (auto self = weak.lock())
      self->on_channel(ev);
  });
  if (ctl_token_ == 0)
    return sys_error("epoll add", "control channel of " + parts_.id, errno);
  pid_token_ = loop_->add(parts_.pidfd.get(), EPOLLIN, [weak](uint32_t) {
    if (auto self = weak.lock())
      self->on_init_exit();
  });
  if (pid_token_ == 0)
    return sys_error("epoll add", "pidfd of " + parts_.id, errno);
  oom_ = std::move(oom);
  if (oom_.fd) {
    oom_token_ = loop_->add(oom_.fd.get(), EPOLLIN, [weak](uint32_t) {
      if (auto self = weak.lock())
        self->on_oom();
    });
    if (oom_token_ == 0)
      return sys_error("epoll add", "oom eventfd of " + parts_.id, errno);
  }
  if (!out_.empty())
    flush_locked();
  // Frames that came before init's hello (a running exec's, after a node
  // restart) are parsed now, not at the next byte.
  if (!in_.empty())
    loop_->post([weak] {
      if (auto self = weak.lock())
        self->on_channel(0);
    });
  return {};
}

void init_channel::on_oom() {
  uint64_t n = 0;
  (void)!::read(oom_.fd.get(), &n, sizeof n);
  std::lock_guard<std::mutex> g(m_);
  if (shut_ || dead_)
    return;
  // SAFETY: the pidfd pins init; killing it kills the pid namespace. The
  // pidfd turning readable then reports the death, with reason "oom".
  oom_killed_ = true;
  ::syscall(SYS_pidfd_send_signal, parts_.pidfd.get(), SIGKILL, nullptr, 0);
}

// -- exec ---------------------------------------------------------------------

uint64_t init_channel::exec(exec_request req, exec_callbacks cb) {
  std::unique_lock<std::mutex> g(m_);
  uint32_t id = next_id_++;
  proto::pty_size size{cb.pty_cols, cb.pty_rows};
  auto frame = encode_exec(id, req, parts_.env, cb.keep_stdin || cb.pty_cols,
                           cb.pty_cols ? &size : nullptr, cb.unbounded_output);
  error err;
  if (!frame)
    err = frame.err();
  else if (shut_)
    err = unavailable("exec in " + parts_.id + ": sandbox destroyed");
  else if (dead_ || !channel_open_)
    err = unavailable("exec in " + parts_.id + ": " + death_);
  if (err) {
    g.unlock();
    loop_->post([cb = std::move(cb), err = std::move(err)] {
      if (cb.on_done)
        cb.on_done(err);
    });
    return id;
  }
  auto p = std::make_shared<pending_exec>();
  p->cb = std::move(cb);
  pending_[id] = std::move(p);
  bool was_empty = out_.empty();
  out_ += *frame;
  if (was_empty)
    flush_locked();
  return id;
}

status init_channel::send_stdin(uint64_t exec_id, std::string_view data, bool close) {
  std::lock_guard<std::mutex> g(m_);
  auto id = static_cast<uint32_t>(exec_id);
  if (shut_ || dead_ || !channel_open_)
    return unavailable("stdin in " + parts_.id + ": " + (shut_ ? "sandbox destroyed" : death_));
  if (exec_id > UINT32_MAX || !pending_.count(id))
    return not_found("stdin in " + parts_.id + ": the command has ended");
  if (data.size() > proto::max_body / 2)
    return too_large("stdin in " + parts_.id + ": more than " + std::to_string(proto::max_body / 2)
                     + " bytes at once");
  bool was_empty = out_.empty();
  out_ += proto::writer(proto::msg::stdin_data, id).str(data).u8(close ? 1 : 0).finish();
  if (was_empty)
    flush_locked();
  return {};
}

status init_channel::resize_pty(uint64_t exec_id, uint16_t cols, uint16_t rows) {
  std::lock_guard<std::mutex> g(m_);
  auto id = static_cast<uint32_t>(exec_id);
  if (shut_ || dead_ || !channel_open_)
    return unavailable("resize terminal in " + parts_.id + ": "
                       + (shut_ ? "sandbox destroyed" : death_));
  auto it = exec_id > UINT32_MAX ? pending_.end() : pending_.find(id);
  if (it == pending_.end() || !it->second->cb.pty_cols)
    return not_found("resize terminal in " + parts_.id + ": the command has ended");
  if (auto why = proto::pty_size_error(cols, rows))
    return invalid_argument("resize terminal in " + parts_.id + ": " + why);
  bool was_empty = out_.empty();
  out_ += proto::encode_pty_resize(id, {cols, rows});
  if (was_empty)
    flush_locked();
  return {};
}

void init_channel::cancel(uint64_t exec_id) {
  std::lock_guard<std::mutex> g(m_);
  auto id = static_cast<uint32_t>(exec_id);
  if (exec_id > UINT32_MAX || !pending_.count(id) || shut_ || dead_ || !channel_open_)
    return;
  // Init SIGKILLs the command's process group; its `done` frame follows.
  bool was_empty = out_.empty();
  out_ += proto::writer(proto::msg::kill, id).finish();
  if (was_empty)
    flush_locked();
}

void init_channel::flush_locked() {
  while (channel_open_ && !out_.empty()) {
    auto n = ::send(parts_.ctl.get(), out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      loop_->modify(ctl_token_, parts_.ctl.get(), EPOLLIN | EPOLLOUT);
      return;
    }
    // EPIPE and friends: init is gone; the pidfd event reports why.
    out_.clear();
    return;
  }
  if (channel_open_)
    loop_->modify(ctl_token_, parts_.ctl.get(), EPOLLIN);
}

void init_channel::unwatch_init_locked() {
  loop_->remove(pid_token_, parts_.pidfd.get());
  pid_token_ = 0;
  if (oom_token_)
    loop_->remove(oom_token_, oom_.fd.get());
  oom_token_ = 0;
}

void init_channel::close_channel_locked() {
  if (!channel_open_)
    return;
  channel_open_ = false;
  close_ports_locked(); // ports: the streams die with the channel
  loop_->remove(ctl_token_, parts_.ctl.get());
  ctl_token_ = 0;
  out_.clear();
}

// -- io_loop thread -----------------------------------------------------------

void init_channel::on_channel(uint32_t events) {
  if (events & EPOLLOUT) {
    std::lock_guard<std::mutex> g(m_);
    flush_locked();
  }
  char buf[65536];
  bool closed = false;
  for (int round = 0; round < 64; ++round) {
    auto n = ::recv(parts_.ctl.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR))
      continue;
    closed = !(n < 0 && errno == EAGAIN);
    break;
  }
  size_t off = 0;
  proto::header h;
  bool broken = false;
  for (;;) {
    std::string_view rest(in_.data() + off, in_.size() - off);
    auto p = proto::peek_frame(rest, h);
    if (p == proto::parse::incomplete)
      break;
    if (p == proto::parse::invalid || !handle_frame(h, rest.substr(proto::header_size, h.length))) {
      broken = true;
      break;
    }
    off += proto::header_size + h.length;
  }
  in_.erase(0, off);
  if (!closed && !broken)
    return;
  pollfd pfd{parts_.pidfd.get(), POLLIN, 0};
  if (closed && ::poll(&pfd, 1, 0) == 1) {
    on_init_exit(); // init is gone: report why, not just "channel closed"
    return;
  }
  if (closed && !broken && reconnect_after_hello())
    return;
  std::string why;
  {
    std::lock_guard<std::mutex> g(m_);
    close_channel_locked();
    if (broken && !mismatch_.empty())
      death_ = mismatch_;
    else
      death_ = broken ? "malformed frame from init" : "control channel closed";
    why = broken ? death_ : "init closed the channel";
  }
  fail_pending(unavailable("exec in " + parts_.id + ": " + why));
}

bool init_channel::reconnect_after_hello() {
  std::lock_guard<std::mutex> g(m_);
  // Version 1 closes the connection at hello; any later close is a close.
  if (!hello_pending_ || !parts_.reconnect || shut_ || dead_)
    return false;
  hello_pending_ = false;
  auto fd = parts_.reconnect();
  if (!fd)
    return false;
  loop_->remove(ctl_token_, parts_.ctl.get());
  parts_.ctl = std::move(*fd);
  ::fcntl(parts_.ctl.get(), F_SETFL, O_NONBLOCK);
  in_.clear();
  out_.clear();
  std::weak_ptr<init_channel> weak = shared_from_this();
  ctl_token_ = loop_->add(parts_.ctl.get(), EPOLLIN, [weak](uint32_t ev) {
    if (auto self = weak.lock())
      self->on_channel(ev);
  });
  if (ctl_token_ == 0)
    return false;
  version_ = 1;
  return true;
}

bool init_channel::handle_frame(const proto::header& h, std::string_view body) {
  if (proto::is_port_frame(h.type)) // ports (init_channel_ports.cpp)
    return on_port_frame(h, body);
  if (h.type == proto::msg::hello) { // the answer to start()'s hello
    proto::hello_msg theirs;
    std::lock_guard<std::mutex> g(m_);
    hello_pending_ = false;
    if (!proto::decode(body, theirs))
      return false;
    version_ = proto::agree(proto::hello_msg{}, theirs);
    if (version_ == 0)
      mismatch_ = "protocol hello with init of " + parts_.id + ": "
                  + proto::mismatch_text(proto::hello_msg{}, theirs);
    return version_ != 0;
  }
  std::shared_ptr<pending_exec> p;
  {
    std::unique_lock<std::mutex> g(m_);
    auto it = pending_.find(h.id);
    if (it == pending_.end()) {
      auto q = queries_.find(h.id);
      if (q == queries_.end())
        return true; // a request that was already failed locally: ignore
      auto fn = std::move(q->second);
      queries_.erase(q);
      g.unlock();
      return fn(&h, body, nullptr);
    }
    p = it->second;
    if (h.type == proto::msg::done || h.type == proto::msg::exec_failed
        || h.type == proto::msg::exec_refused)
      pending_.erase(it);
  }
  proto::reader r(body);
  switch (h.type) {
  case proto::msg::started: {
    auto pid = r.i32();
    if (!r.done())
      return false;
    if (p->cb.on_started)
      p->cb.on_started(pid);
    return true;
  }
  case proto::msg::output: {
    auto stream = r.u8();
    auto data = r.str();
    if (!r.done() || (stream != 1 && stream != 2))
      return false;
    auto& seen = p->seen[stream - 1];
    if (!p->cb.pty_cols && !p->cb.unbounded_output && seen + data.size() > proto::max_output) {
      data.resize(proto::max_output - std::min(seen, proto::max_output));
      p->result.truncated = true;
    }
    seen += data.size();
    if (p->cb.keep_output) {
      auto& kept = stream == 1 ? p->result.stdout_data : p->result.stderr_data;
      // The node's output budget is full: this exec keeps its newest bytes.
      auto& ks = p->streams[stream - 1];
      (void)ks.append(kept, data, p->charge);
      p->result.truncated = p->result.truncated || ks.dropped > 0;
    }
    if (p->cb.on_output && !data.empty())
      p->cb.on_output(exec_chunk{stream, std::move(data)});
    return true;
  }
  case proto::msg::done: {
    proto::done_msg d;
    if (!proto::decode(body, d))
      return false;
    p->result.exit_code = d.exit_code;
    p->result.timed_out = d.timed_out;
    p->result.truncated = p->result.truncated || d.truncated;
    p->result.duration_ms = d.duration_ms;
    if (p->cb.on_done)
      p->cb.on_done(std::move(p->result));
    return true;
  }
  case proto::msg::exec_failed: {
    auto msg = r.str();
    if (p->cb.on_done)
      p->cb.on_done(internal_error("exec in " + parts_.id + ": " + msg));
    return r.done();
  }
  case proto::msg::exec_refused: {
    auto msg = r.str();
    if (p->cb.on_done)
      p->cb.on_done(invalid_argument("exec in " + parts_.id + ": " + msg));
    return r.done();
  }
  default:
    return false;
  }
}

void init_channel::fail_pending(const error& e) {
  std::map<uint32_t, std::shared_ptr<pending_exec>> todo;
  std::map<uint32_t, query_fn> queries;
  {
    std::lock_guard<std::mutex> g(m_);
    todo.swap(pending_);
    queries.swap(queries_);
  }
  for (auto& [id, p] : todo)
    if (p->cb.on_done)
      p->cb.on_done(e);
  for (auto& [id, fn] : queries)
    fn(nullptr, {}, &e);
}

std::string init_channel::exit_reason() {
  std::string how;
  if (parts_.reap) {
    siginfo_t si{};
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(parts_.pidfd.get()), &si,
                 WEXITED | WNOHANG) == 0 && si.si_pid != 0) {
      parts_.reap = false;
      how = si.si_code == CLD_EXITED ? "exit status " + std::to_string(si.si_status)
                                     : std::string("signal ") + strsignal(si.si_status);
    }
  }
  if ((oom_.counted && oom_.counted()) || oom_killed_)
    return "oom";
  return "init exited" + (how.empty() ? std::string() : ": " + how);
}

void init_channel::on_init_exit() {
  std::function<void(std::string)> notify;
  std::string reason;
  {
    std::lock_guard<std::mutex> g(m_);
    if (shut_ || dead_)
      return;
    dead_ = true;
    unwatch_init_locked();
    close_channel_locked();
    reason = exit_reason();
    death_ = "init exited (" + reason + ")";
    died_of_ = reason;
    notify = on_exit_;
  }
  fail_pending(unavailable("exec in " + parts_.id + ": " + death_));
  if (notify)
    notify(reason);
}

// -- init's life ----------------------------------------------------------------

void init_channel::on_exit(std::function<void(std::string)> f) {
  std::string reason;
  {
    std::lock_guard<std::mutex> g(m_);
    if (!dead_ || shut_) {
      on_exit_ = std::move(f);
      return;
    }
    reason = died_of_;
  }
  // Init died before anyone listened (a recovered sandbox whose init exited
  // between recover() and its adoption): tell the late listener now.
  f(std::move(reason));
}

bool init_channel::gone() const {
  std::lock_guard<std::mutex> g(m_);
  return shut_ || dead_;
}

bool init_channel::is_shut() const {
  std::lock_guard<std::mutex> g(m_);
  return shut_;
}

bool init_channel::shut() {
  std::lock_guard<std::mutex> g(m_);
  if (shut_)
    return false;
  shut_ = true;
  close_channel_locked();
  unwatch_init_locked();
  return true;
}

void init_channel::kill_init() {
  // SAFETY: the pidfd pins this exact process; killing a pid namespace's
  // init kills every process in it.
  ::syscall(SYS_pidfd_send_signal, parts_.pidfd.get(), SIGKILL, nullptr, 0);
}

void init_channel::wait_init() {
  pollfd pfd{parts_.pidfd.get(), POLLIN, 0};
  while (::poll(&pfd, 1, 10000) < 0 && errno == EINTR) {
  }
  // No lock: after shut() the loop thread no longer reaps (on_init_exit
  // returns early), and waitid may block.
  if (parts_.reap) {
    siginfo_t si{};
    ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(parts_.pidfd.get()), &si, WEXITED);
    parts_.reap = false;
  }
}

void init_channel::fail_pending_later() {
  auto self = shared_from_this();
  loop_->post([self] {
    self->fail_pending(unavailable("exec in " + self->parts_.id + ": sandbox destroyed"));
  });
}

} // namespace dsec::backends
#include "core/clock.hpp"
