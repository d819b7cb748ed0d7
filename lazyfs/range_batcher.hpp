// Concurrent misses on one blob share a request. A registry charges per
// request, not per byte or range: CNCF distribution spends ~3.5 ms of CPU on
// a request and ~0.5 ms on each further range of a multi-range one
// (bench/range_latency.py --multi). So while a request of a blob is in
// flight, the range requests other readers make on that blob wait, and go
// out together as ONE multi-range request (registry/byteranges.hpp) when it
// returns: group commit, one request in flight per blob. A lone reader
// waits for nothing; a burst of readers of one image makes about one request
// per round trip instead of one per reader.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lazyfs/blob_fs.hpp"

namespace dsec::lazyfs {

class range_batcher : public range_fetcher {
 public:
  /// Sends through `inner`, at most `max_ranges` ranges and `max_bytes`
  /// bytes in one request.
  explicit range_batcher(std::shared_ptr<range_fetcher> inner, size_t max_ranges = 16,
                         uint64_t max_bytes = 8u << 20);

  /// Bytes [offset, offset+len) of `src`'s blob: sent now if no request of
  /// the blob is in flight, else with the others that queued meanwhile.
  /// The request's error is every range's error (the chunk cache retries).
  expected<std::string> fetch(const registry::blob_source& src, uint64_t offset,
                              uint32_t len) override;
  expected<std::vector<std::string>> fetch_ranges(
    const registry::blob_source& src, const std::vector<registry::byte_range>& ranges) override {
    return inner_->fetch_ranges(src, ranges);
  }

  /// Requests sent and the ranges (readers' fetches) they carried.
  [[nodiscard]] uint64_t requests() const { return requests_.load(); }
  [[nodiscard]] uint64_t ranges() const { return ranges_.load(); }
  [[nodiscard]] uint64_t storage_reads() const override { return inner_->storage_reads(); }
  /// Fetches of `src`'s blob waiting for the request in flight (tests).
  [[nodiscard]] size_t queued(const registry::blob_source& src);

 private:
  struct pending {
    uint64_t offset = 0;
    uint32_t len = 0;
    bool taken = false, done = false;
    expected<std::string> result{std::string()};
  };
  struct lane {
    std::deque<std::shared_ptr<pending>> queue;
    bool busy = false;
  };
  static std::string key(const registry::blob_source& src);
  /// Sends `batch` (taken from a lane) as one request and fills in results.
  void send(const registry::blob_source& src, const std::vector<std::shared_ptr<pending>>& batch);

  std::shared_ptr<range_fetcher> inner_;
  size_t max_ranges_;
  uint64_t max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, lane> lanes_;
  std::atomic<uint64_t> requests_{0}, ranges_{0};
};

/// Ranges `in` (any order, may touch or overlap) as the sorted, disjoint
/// unions a multi-range request asks for; `of[i]` is the union holding in[i].
std::vector<registry::byte_range> union_ranges(const std::vector<registry::byte_range>& in,
                                               std::vector<size_t>& of);

} // namespace dsec::lazyfs
