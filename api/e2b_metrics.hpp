// E2B's sandbox metrics over time, the CAF-free half: a bounded history of
// samples per sandbox (the node's E2B gateway fills it every
// sample_interval from the sandbox's own metrics operation, sbmetrics_op,
// plus the disk its directory takes), and the answers of GET
// /sandboxes/{id}/metrics and GET /sandboxes/metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::e2b {

/// How often a sandbox is sampled: E2B's collection bucket (5 s), so its
/// SDK's expectations of spacing hold; shorter costs a cgroup read and a
/// walk of the sandbox's changes per sandbox per tick.
constexpr std::chrono::seconds sample_interval{5};
/// Samples kept per sandbox: one hour at sample_interval. Older ones drop
/// off; a longer history would hold memory per sandbox for ever-idle boxes.
constexpr size_t max_samples = 720;

/// One sample as E2B shows it: the sandbox's own (CPU, memory) and the disk
/// it takes on the node that runs it.
struct metric_sample {
  sandbox_metric m;
  /// Bytes allocated under the sandbox's directory on its node (a
  /// container's own changes, a microVM's disk image; 0 where the answering
  /// node is not the owner), and its disk limit.
  int64_t disk_used = 0;
  int64_t disk_total = 0;
};

/// Bytes allocated to the files under `dir` (st_blocks), neither following
/// links nor leaving its filesystem (a mounted root is not counted twice);
/// at most `max_entries` entries, so a huge tree bounds the walk. 0 if `dir`
/// is absent. Blocking.
int64_t disk_bytes(const std::string& dir, size_t max_entries = 200000);

/// Samples per sandbox, oldest first, at most max_samples each. Thread-safe:
/// the gateway and the samplers run on different threads.
class metrics_history {
 public:
  /// Adds `m` to `id`'s samples (dropping the oldest past max_samples).
  void add(const std::string& id, const metric_sample& m);
  /// `id`'s samples with from_ms <= timestamp <= to_ms (either bound absent: open).
  std::vector<metric_sample> range(const std::string& id, std::optional<int64_t> from_ms,
                                    std::optional<int64_t> to_ms) const;
  /// The newest sample of `id`, if any.
  std::optional<metric_sample> latest(const std::string& id) const;
  /// True if no sampler ran for `id`: the caller starts one.
  bool claim(const std::string& id);
  /// Forgets `id` (its sampler ended: the sandbox is gone).
  void forget(const std::string& id);

 private:
  mutable std::mutex m_;
  std::map<std::string, std::deque<metric_sample>> samples_;
  std::set<std::string> sampled_;
};

/// E2B's SandboxMetric array (timestamp, timestampUnix, cpuCount,
/// cpuUsedPct, memUsed, memTotal, diskUsed, diskTotal; bytes).
std::string encode_metric_list(const std::vector<metric_sample>& v);

/// GET /sandboxes/metrics: {"sandboxes": {id: SandboxMetric}}.
std::string encode_metric_map(const std::map<std::string, metric_sample>& m);

/// The sandbox_ids of GET /sandboxes/metrics (comma list, 1-100 ids); any
/// other parameter is invalid_argument naming it.
[[nodiscard]] expected<std::vector<std::string>> parse_metric_ids(
  const std::map<std::string, std::string>& q);

} // namespace dsec::e2b
