// In-flight QEMUs (see inflight.hpp).
#include "backends/vm/inflight.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dsec::backends {

namespace {

void kill_pidfd(int pidfd) {
  // A reaped QEMU's pidfd answers ESRCH: harmless, and the duplicate we hold
  // can never name another process.
  ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
}

} // namespace

inflight_qemus::guard& inflight_qemus::guard::operator=(guard&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    id_ = o.id_;
    o.owner_ = nullptr;
  }
  return *this;
}

void inflight_qemus::guard::reset() {
  if (!owner_)
    return;
  std::lock_guard<std::mutex> g(owner_->m_);
  owner_->pidfds_.erase(id_);
  owner_ = nullptr;
}

inflight_qemus::guard inflight_qemus::watch(int pidfd) {
  std::lock_guard<std::mutex> g(m_);
  if (stopping_) {
    kill_pidfd(pidfd);
    return {};
  }
  auto id = ++next_;
  pidfds_.emplace(id, sys::unique_fd{::fcntl(pidfd, F_DUPFD_CLOEXEC, 0)});
  return guard{this, id};
}

bool inflight_qemus::stopping() const {
  std::lock_guard<std::mutex> g(m_);
  return stopping_;
}

void inflight_qemus::cancel_all() {
  std::vector<std::function<void()>> hooks;
  std::map<uint64_t, sys::unique_fd> pidfds;
  {
    std::lock_guard<std::mutex> g(m_);
    if (stopping_)
      return;
    stopping_ = true;
    hooks.swap(hooks_);
    pidfds.swap(pidfds_); // our duplicates: a guard that goes now erases nothing
  }
  // Hooks first: waiters learn that the node stops before their guest's
  // death wakes them, so none mistakes it for a failed boot and retries.
  for (auto& f : hooks)
    f();
  for (auto& [id, fd] : pidfds)
    if (fd)
      kill_pidfd(fd.get());
}

void inflight_qemus::on_cancel(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(m_);
    if (!stopping_) {
      hooks_.push_back(std::move(f));
      return;
    }
  }
  f();
}

error inflight_qemus::stopping_error(const std::string& what) {
  return unavailable(what + ": node is stopping");
}

} // namespace dsec::backends
