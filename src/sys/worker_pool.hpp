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
  /// Starts `threads` workers.
  explicit worker_pool(size_t threads);
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  /// Runs every queued job, then joins the workers.
  ~worker_pool();

  /// Queues `job`; returns at once.
  void post(std::function<void()> job);

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
