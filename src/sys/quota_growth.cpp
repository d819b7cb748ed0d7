// Quota volume growth thread (see quota_growth.hpp).
#include "sys/quota_growth.hpp"

#include <chrono>

namespace dsec::sys {

quota_growth::quota_growth(std::shared_ptr<const quota_volume> volume, uint64_t keep_host_free,
                           log_fn log)
  : volume_(std::move(volume)), keep_host_free_(keep_host_free), log_(std::move(log)) {
  thread_ = std::thread([this] { loop(); });
}

quota_growth::~quota_growth() {
  {
    std::lock_guard lock{mu_};
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void quota_growth::loop() {
  std::string last_error;
  std::unique_lock lock{mu_};
  while (!wake_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) {
    lock.unlock();
    auto grown = volume_->grow_if_low(keep_host_free_);
    if (!grown && grown.err().message != last_error) {
      last_error = grown.err().message;
      log_("sandbox volume cannot grow: " + last_error);
    } else if (grown && *grown > 0) {
      last_error.clear();
      log_("sandbox volume grew by " + std::to_string(*grown >> 20) + " MiB to "
           + std::to_string(volume_->size_bytes() >> 20) + " MiB (at most "
           + std::to_string(volume_->max_bytes() >> 20) + " MiB)");
    }
    lock.lock();
  }
}

} // namespace dsec::sys
