// The container backend's epoll thread: handlers looked up under a mutex,
// run without it, so a handler may register, remove or post freely.
#include "backends/container/io_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace dsec::backends {

namespace {
constexpr uint64_t wake_token = 0;
} // namespace

io_loop::io_loop()
  : ep_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = wake_token;
  ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { run(); });
}

io_loop::~io_loop() {
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable())
    thread_.join();
}

uint64_t io_loop::add(int fd, uint32_t events, handler h) {
  uint64_t token;
  {
    std::lock_guard<std::mutex> g(m_);
    token = next_token_++;
    handlers_[token] = std::make_shared<handler>(std::move(h));
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    int err = errno;
    std::lock_guard<std::mutex> g(m_);
    handlers_.erase(token);
    errno = err;
    return 0;
  }
  return token;
}

void io_loop::modify(uint64_t token, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  ::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, fd, &ev);
}

void io_loop::remove(uint64_t token, int fd) {
  if (token == 0)
    return;
  ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> g(m_);
  handlers_.erase(token);
}

void io_loop::post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(m_);
    posted_.push_back(std::move(f));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void io_loop::drain_posted() {
  uint64_t v;
  (void)!::read(wake_.get(), &v, sizeof(v));
  std::vector<std::function<void()>> todo;
  {
    std::lock_guard<std::mutex> g(m_);
    todo.swap(posted_);
  }
  for (auto& f : todo)
    f();
}

void io_loop::run() {
  epoll_event evs[64];
  for (;;) {
    int n = ::epoll_wait(ep_.get(), evs, 64, -1);
    if (n < 0 && errno != EINTR)
      return;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == wake_token) {
        drain_posted();
        continue;
      }
      std::shared_ptr<handler> h;
      {
        std::lock_guard<std::mutex> g(m_);
        auto it = handlers_.find(evs[i].data.u64);
        if (it != handlers_.end())
          h = it->second;
      }
      if (h)
        (*h)(evs[i].events);
    }
    std::lock_guard<std::mutex> g(m_);
    if (stop_ && posted_.empty())
      return;
  }
}

} // namespace dsec::backends
