// In-flight QEMUs: the guests a worker thread is waiting on while they boot,
// restore or prove the accelerator (a create's boot, a template build, a
// clone's restore, a resume, the KVM probe). Those waits last up to the boot
// deadline (90 s for a q35 guest under TCG), and the node joins its worker
// pool when it stops; so the node's stop path calls cancel_all() first: every
// registered QEMU is killed (its waiter sees the pidfd and returns at once),
// every later registration is refused, and the cancelled operation fails with
// unavailable "...: node is stopping", leaving nothing behind (the callers'
// usual failure path reaps QEMU and removes files).
//
// Running sandboxes' QEMUs are not registered: the lifecycle actor destroys
// those in order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// The node's in-flight QEMUs. Thread-safe.
class inflight_qemus {
 public:
  /// Keeps one QEMU registered while it lives.
  class guard {
   public:
    guard() = default;
    guard(inflight_qemus* owner, uint64_t id) : owner_(owner), id_(id) {}
    guard(guard&& o) noexcept : owner_(o.owner_), id_(o.id_) { o.owner_ = nullptr; }
    guard& operator=(guard&& o) noexcept;
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    ~guard() { reset(); }
    /// Unregisters (the QEMU is now a running sandbox's, or gone).
    void reset();

   private:
    inflight_qemus* owner_ = nullptr;
    uint64_t id_ = 0;
  };

  inflight_qemus() = default;
  inflight_qemus(const inflight_qemus&) = delete;
  inflight_qemus& operator=(const inflight_qemus&) = delete;

  /// Registers the QEMU behind `pidfd` (a duplicate is kept: the caller may
  /// close its own). If the node is stopping already, the QEMU is killed at
  /// once and stopping() says so; the caller's wait then fails as usual.
  [[nodiscard]] guard watch(int pidfd);

  /// True once cancel_all() ran: no new guest may start.
  [[nodiscard]] bool stopping() const;

  /// Kills every registered QEMU, refuses new ones and runs the on_cancel
  /// hooks. Idempotent. Never blocks on a guest.
  void cancel_all();

  /// `f` runs (once) inside cancel_all(), or at once if it ran already;
  /// waiters on condition variables use it to wake up.
  void on_cancel(std::function<void()> f);

  /// unavailable "<what>: node is stopping".
  static error stopping_error(const std::string& what);

 private:
  mutable std::mutex m_;
  bool stopping_ = false;
  uint64_t next_ = 0;
  std::map<uint64_t, sys::unique_fd> pidfds_;
  std::vector<std::function<void()>> hooks_;
};

} // namespace dsec::backends
