// worker_pool: a fixed set of threads for blocking work (clone, mount, waitpid,
// file I/O) so actors never block a scheduler thread. Jobs report back by
// messaging their actor; the pool knows nothing about actors.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsec::sys {

/// A FIFO job queue served by `threads` threads.
class worker_pool {
 public:
  /// Starts `threads` workers (0: jobs run only through run_pending()).
  explicit worker_pool(size_t threads);
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  /// Runs every queued job, then joins the workers.
  ~worker_pool();

  /// Queues `job`; returns at once.
  void post(std::function<void()> job);

  /// Runs every queued job on the calling thread, including jobs those jobs
  /// queue; returns how many ran. With zero threads this makes the pool
  /// deterministic for actor tests.
  size_t run_pending();

  /// Jobs queued or running.
  size_t pending() const;

 private:
  void run();

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

} // namespace dsec::sys
