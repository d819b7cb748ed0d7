// Where a registry keeps a blob's bytes. A registry backed by object
// storage (Docker Hub, GHCR, ECR, Harbor on S3, distribution's redirect or
// CloudFront middleware) answers a blob GET with a redirect to a storage URL
// that grants the read by itself (presigned, or public). A lazy blob is read
// in hundreds of ranges; asking the registry for each one costs a round trip
// and the registry's work every time. The first range's final URL is kept
// for a short while and later ranges go straight there, as containerd's
// stargz snapshotter does; a failure there forgets it and asks the registry
// again. A registry that serves its blobs itself (no redirect) leaves
// nothing here.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace dsec::registry {

class storage_locations {
 public:
  using clock = std::chrono::steady_clock;

  /// How long a location is used before the registry is asked again. A
  /// presigned URL lives for minutes (S3's distribution driver: 20 min), so
  /// one minute leaves room; a revoked grant is noticed at its first failure.
  static constexpr std::chrono::seconds ttl{60};

  /// The location of `digest` at `host`, if one is known and fresh at `now`.
  std::optional<std::string> find(const std::string& host, const std::string& digest,
                                  clock::time_point now = clock::now());
  /// Remembers that a read of `digest` through `host` ended at `url` (a
  /// different URL than the registry's own: a redirect was followed).
  void remember(const std::string& host, const std::string& digest, const std::string& url,
                clock::time_point now = clock::now());
  /// Forgets it (its read failed: expired, revoked or gone).
  void forget(const std::string& host, const std::string& digest);

  size_t size() const;

 private:
  /// Bound on entries: a node reads at most a few thousand blobs at a time;
  /// past it the stale ones go, then all (they are only a shortcut).
  static constexpr size_t max_entries = 4096;

  struct entry {
    std::string url;
    clock::time_point until;
  };
  mutable std::mutex mu_;
  std::map<std::string, entry> by_key_;  // "host digest"
};

} // namespace dsec::registry
