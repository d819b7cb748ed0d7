// io_loop: the one backend-owned I/O thread of a node's container and VM
// sandboxes. An epoll set watches every sandbox's control channel and a
// pidfd of each init (for a VM guest, an eventfd that stands for QEMU);
// exec callbacks run on this thread, so the per-exec bookkeeping needs no
// locks of its own. Other threads register descriptors and post closures.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sys/fd.hpp"

namespace dsec::backends {

/// An epoll loop on its own thread. Thread-safe.
class io_loop {
 public:
  /// Called on the loop thread with the epoll events of one descriptor.
  using handler = std::function<void(uint32_t events)>;

  // -- constructors ---------------------------------------------------------

  io_loop();
  ~io_loop();
  io_loop(const io_loop&) = delete;
  io_loop& operator=(const io_loop&) = delete;

  // -- registration ---------------------------------------------------------

  /// Watches `fd` for `events` (level-triggered); returns a token for
  /// modify/remove, 0 on failure (errno set).
  uint64_t add(int fd, uint32_t events, handler h);

  /// Changes the events watched for a registration.
  void modify(uint64_t token, int fd, uint32_t events);

  /// Stops watching; the handler does not run for events fetched after this
  /// returns (one already running on the loop thread may finish).
  void remove(uint64_t token, int fd);

  /// Runs `f` on the loop thread soon.
  void post(std::function<void()> f);

  /// True when called from the loop thread.
  [[nodiscard]] bool in_loop() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  /// The state the thread uses; shared with it, so a loop whose last owner
  /// goes away on the loop thread itself (a sandbox released in a handler)
  /// can detach the thread and let it finish safely.
  struct core {
    sys::unique_fd ep;
    sys::unique_fd wake;
    std::mutex m;
    uint64_t next_token = 1;
    std::unordered_map<uint64_t, std::shared_ptr<handler>> handlers;
    std::vector<std::function<void()>> posted;
    bool stop = false;

    void run();
    void drain_posted();
    void wake_up();
  };

  std::shared_ptr<core> c_;
  std::thread thread_;
};

} // namespace dsec::backends
