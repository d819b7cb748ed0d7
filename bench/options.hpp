// Options of `dsec bench burst`, each with its default and the reason for it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::bench {

/// Parsed `dsec bench burst` flags.
struct burst_options {
  /// The node's REST gateway (DESIGN.md default).
  std::string rest = "127.0.0.1:7070";
  /// Layer of every dsec sandbox; busybox so the peers run the same rootfs.
  std::string layer = "base/busybox@1";
  /// Sandboxes per burst: enough to reach a steady rate, small enough for
  /// crun's ~35/s to finish in seconds.
  int count = 200;
  /// Creates in flight during the burst (one thread and connection each).
  int inflight = 16;
  /// Sequential trials per latency metric; p99 of 50 is the 2nd-worst value.
  int samples = 50;
  /// Idle sandboxes for the memory measurement.
  int idle = 50;
  /// Untimed trials before each latency metric (first runs fill caches).
  int warmup = 2;
  /// Peer runtimes to compare with; empty = none.
  std::vector<std::string> peers = {"crun", "bwrap"};
  /// Busybox rootfs for the peers; "" = build one in the work dir.
  std::string rootfs;
  /// Also write the JSON report here.
  std::string out;
  /// Skip dsec (no node needed); run only the peers.
  bool peers_only = false;
  /// The node's pid when /healthz does not report it; -1 = find `dsec node`.
  pid_t node_pid = -1;
  /// The v1 memory cgroup holding the node's sandboxes.
  std::string dsec_cgroup = "/sys/fs/cgroup/memory/dsec";
  /// A latency metric stops early after this many seconds, so a slow system
  /// cannot push the run far past its ~3 minute budget (n shows the cut).
  double phase_cap_s = 30;
};

/// Parses the flags after `dsec bench burst` (`--flag value` or `--flag=value`).
/// Fails with invalid_argument naming the flag.
expected<burst_options> parse_burst_options(const std::vector<std::string>& args);

/// The usage text of `dsec bench`.
const char* bench_usage();

} // namespace dsec::bench
