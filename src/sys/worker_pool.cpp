// worker_pool implementation.
#include "sys/worker_pool.hpp"

namespace dsec::sys {

worker_pool::worker_pool(size_t threads) {
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { run(); });
}

worker_pool::~worker_pool() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void worker_pool::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

size_t worker_pool::run_pending() {
  size_t n = 0;
  for (;;) {
    std::function<void()> job;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (jobs_.empty())
        return n;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
    ++n;
  }
}

size_t worker_pool::pending() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return jobs_.size() + running_;
}

void worker_pool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> guard{mtx_};
      cv_.wait(guard, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty())
        return; // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
    }
    job();
    std::lock_guard<std::mutex> guard{mtx_};
    --running_;
  }
}

} // namespace dsec::sys
