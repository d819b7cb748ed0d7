// Keeps a node's quota volume ahead of its use (see quota_volume.hpp): a
// thread of its own looks at the volume's free space four times a second (one
// statfs) and grows it when it runs low, so sandboxes that write steadily
// never see the volume's current size, only its maximum. Creates grow it
// too, on their worker thread, before they take a subvolume.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sys/quota_volume.hpp"

namespace dsec::sys {

class quota_growth {
 public:
  using log_fn = std::function<void(const std::string&)>;

  /// Starts watching `volume`; growth leaves `keep_host_free` bytes free on
  /// the host. `log` hears each growth and each change of failure.
  quota_growth(std::shared_ptr<const quota_volume> volume, uint64_t keep_host_free, log_fn log);
  ~quota_growth(); ///< stops and joins the thread

  quota_growth(const quota_growth&) = delete;
  quota_growth& operator=(const quota_growth&) = delete;

 private:
  void loop();

  std::shared_ptr<const quota_volume> volume_;
  uint64_t keep_host_free_;
  log_fn log_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace dsec::sys
