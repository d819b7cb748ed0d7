// The lazy blob daemon's counters as a file: <cache>/stats.json, written
// atomically by the daemon at most once a second (and at once when the
// number of open blobs changes), read by the node for /metrics and by
// stop_daemon to learn whether a layer mount still uses the daemon.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "lazyfs/chunk_cache.hpp"

namespace dsec::lazyfs {

struct daemon_stats {
  cache_counters cache;
  uint64_t budget_bytes = 0;
  /// Range requests sent straight to a blob's storage, past its registry's
  /// redirect (registry/storage_locations.hpp).
  uint64_t storage_reads = 0;
  /// Blob files open now (each EROFS mount on a lazy layer holds one).
  int64_t open_files = 0;
  int64_t pid = 0;
  /// When the daemon wrote this (Unix ms).
  int64_t updated_ms = 0;
};

/// Writes `s` to `path` (temp + rename).
status write_stats(const std::string& path, const daemon_stats& s);

/// Reads what write_stats wrote; not_found if the file is missing.
expected<daemon_stats> read_stats(const std::string& path);

/// The dsec_lazy_* families in Prometheus text, labelled with `node`.
std::string metrics_text(const daemon_stats& s, const std::string& node);

} // namespace dsec::lazyfs
