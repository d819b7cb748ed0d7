// The lazy blob daemon's range fetcher over the registry client: one client
// per registry host (opened at the first read of one of its blobs, mirrors
// and credentials as configured), an HTTP Range request per stretch of
// chunks, or one for several stretches (range_batcher.hpp).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "lazyfs/blob_fs.hpp"
#include "registry/registry_client.hpp"
#include "registry/registry_options.hpp"

namespace dsec::lazyfs {

/// Bound on one range request without progress, in the daemon. 5 s: a
/// 256 KiB chunk takes milliseconds on any working link; three attempts
/// with backoff stay inside the ~20 s a reader may wait before EIO.
constexpr std::chrono::milliseconds range_request_timeout{5000};

class registry_fetcher : public range_fetcher {
 public:
  explicit registry_fetcher(registry::registry_options opts);

  expected<std::string> fetch(const registry::blob_source& src, uint64_t offset,
                              uint32_t len) override;
  /// One multi-range request; a registry that answers it otherwise (no
  /// multipart, the whole blob) is asked one range at a time from then on.
  expected<std::vector<std::string>> fetch_ranges(
    const registry::blob_source& src, const std::vector<registry::byte_range>& ranges) override;
  [[nodiscard]] uint64_t storage_reads() const override;

 private:
  expected<std::shared_ptr<registry::registry_client>> client(const std::string& host);

  registry::registry_options opts_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<registry::registry_client>> clients_;
  /// Registries that did not answer a multi-range request as one.
  std::set<std::string> single_range_;
};

} // namespace dsec::lazyfs
