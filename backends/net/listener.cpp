// The servers' shared skeleton (see listener.hpp).
#include "backends/net/listener.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace dsec::net {

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0)
      return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_full(int fd, uint8_t* p, size_t n) {
  while (n) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0)
      return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

void set_timeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// -- loop_thread -----------------------------------------------------------------

loop_thread::loop_thread() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void loop_thread::start(std::function<void()> body) {
  t_ = std::thread(std::move(body));
}

void loop_thread::stop() {
  stop_ = true;
  if (wake_ >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof(one));
  }
  if (t_.joinable())
    t_.join();
  if (wake_ >= 0)
    ::close(wake_);
  wake_ = -1;
}

// -- conn_threads ------------------------------------------------------------------

bool conn_threads::spawn(int fd, std::function<void(conn&)> serve) {
  std::lock_guard<std::mutex> g(m_);
  if (stopped_ || slots_.size() >= max_) {
    ::close(fd);
    return false;
  }
  auto& s = slots_.emplace_back();
  s.c.client = fd;
  // The slot's address is stable (a list) until reap() sees it done.
  s.t = std::thread([this, &s, serve = std::move(serve)] {
    serve(s.c);
    std::lock_guard<std::mutex> g2(m_);
    if (int up = s.c.other.exchange(-1); up >= 0)
      ::close(up);
    ::close(s.c.client);
    s.c.client = -1;
    s.done = true;
  });
  return true;
}

void conn_threads::reap() {
  std::list<slot> ended;
  {
    std::lock_guard<std::mutex> g(m_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      auto next = std::next(it);
      if (it->done)
        ended.splice(ended.end(), slots_, it);
      it = next;
    }
  }
  for (auto& s : ended)
    s.t.join();
}

void conn_threads::stop() {
  {
    std::lock_guard<std::mutex> g(m_);
    stopped_ = true;
    for (auto& s : slots_) {
      if (s.done)
        continue;
      ::shutdown(s.c.client, SHUT_RDWR);
      if (int up = s.c.other.load(); up >= 0)
        ::shutdown(up, SHUT_RDWR);
    }
  }
  // No new slots after stopped_; threads still finishing take m_ themselves.
  for (auto& s : slots_)
    if (s.t.joinable())
      s.t.join();
  slots_.clear();
}

} // namespace dsec::net
