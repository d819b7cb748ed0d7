// The port dialer thread (see port_dialer.hpp).
#include "actors/port_dialer.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace dsec::ports {

namespace {

class dialer {
 public:
  static dialer& instance() {
    static dialer d;
    return d;
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(m_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  ~dialer() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable())
      thread_.join();
  }

 private:
  dialer() : thread_([this] { run(); }) {}
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty())
          return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace

void post_dial(std::function<void()> job) { dialer::instance().post(std::move(job)); }

} // namespace dsec::ports
