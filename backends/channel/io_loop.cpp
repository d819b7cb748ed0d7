// The backends' epoll thread (container and VM sandboxes share it):
// handlers looked up under a mutex, run without it, so a handler may
// register, remove or post freely.
#include "backends/channel/io_loop.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace dsec::backends {

namespace {
constexpr uint64_t wake_token = 0;
} // namespace

io_loop::io_loop() : c_(std::make_shared<core>()) {
  c_->ep.reset(::epoll_create1(EPOLL_CLOEXEC));
  c_->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = wake_token;
  ::epoll_ctl(c_->ep.get(), EPOLL_CTL_ADD, c_->wake.get(), &ev);
  thread_ = std::thread([c = c_] { c->run(); });
}

io_loop::~io_loop() {
  {
    std::lock_guard<std::mutex> g(c_->m);
    c_->stop = true;
  }
  c_->wake_up();
  if (in_loop())
    thread_.detach(); // we are inside a handler; the thread ends after it
  else
    thread_.join();
}

uint64_t io_loop::add(int fd, uint32_t events, handler h) {
  uint64_t token;
  {
    std::lock_guard<std::mutex> g(c_->m);
    token = c_->next_token++;
    c_->handlers[token] = std::make_shared<handler>(std::move(h));
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(c_->ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    int err = errno;
    std::lock_guard<std::mutex> g(c_->m);
    c_->handlers.erase(token);
    errno = err;
    return 0;
  }
  return token;
}

void io_loop::modify(uint64_t token, int fd, uint32_t events) {
  if (token == 0)
    return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  ::epoll_ctl(c_->ep.get(), EPOLL_CTL_MOD, fd, &ev);
}

void io_loop::remove(uint64_t token, int fd) {
  if (token == 0)
    return;
  ::epoll_ctl(c_->ep.get(), EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> g(c_->m);
  c_->handlers.erase(token);
}

void io_loop::post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(c_->m);
    c_->posted.push_back(std::move(f));
  }
  c_->wake_up();
}

void io_loop::core::wake_up() {
  uint64_t one = 1;
  (void)!::write(wake.get(), &one, sizeof(one));
}

void io_loop::core::drain_posted() {
  uint64_t v;
  (void)!::read(wake.get(), &v, sizeof(v));
  std::vector<std::function<void()>> todo;
  {
    std::lock_guard<std::mutex> g(m);
    todo.swap(posted);
  }
  for (auto& f : todo)
    f();
}

void io_loop::core::run() {
  epoll_event evs[64];
  for (;;) {
    int n = ::epoll_wait(ep.get(), evs, 64, -1);
    if (n < 0 && errno != EINTR)
      return;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == wake_token) {
        drain_posted();
        continue;
      }
      std::shared_ptr<handler> h;
      {
        std::lock_guard<std::mutex> g(m);
        auto it = handlers.find(evs[i].data.u64);
        if (it != handlers.end())
          h = it->second;
      }
      if (h)
        (*h)(evs[i].events);
    }
    std::lock_guard<std::mutex> g(m);
    if (stop && posted.empty())
      return;
  }
}

} // namespace dsec::backends
