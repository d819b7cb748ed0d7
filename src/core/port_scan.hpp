// Port-scan detection (issue 29 part 4): agents scan a node's subnet and
// host for reachable mirrors. Every probe is already denied and counted by
// the sandbox's eBPF allow-list (`denials.network`, the last 16 targets in
// `recent`); this turns a scan into ONE event a trainer or an operator can
// act on, instead of hundreds of lines.
//
// A scan is: at least `port_scan_denials` denied network attempts, towards
// at least `port_scan_targets` distinct host:port targets among those seen.
// A program that retries one blocked address (a package manager whose
// mirror is closed) is not a scan however often it retries. The event is
// raised once per sandbox; it stays first in `recent` and its text keeps the
// running totals ("net port-scan: 254 denied attempts, 200+ targets").
// Detection runs on the node's refresh pass (every 5 s, whether or not
// anyone reads the sandbox; the node logs the event once) and whenever the
// sandbox's denials are read (GET of the sandbox, /metrics): targets are
// sampled from `recent` at those reads (backends/net/net_refresh.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <set>
#include <string>

#include "core/types.hpp"

namespace dsec {

/// Denied network attempts before a sandbox can count as scanning: 32 is
/// beyond what a tool retrying its mirrors makes in a run (pip tries each
/// index 5 times), far below the hundreds a subnet or port sweep makes.
constexpr int64_t port_scan_denials = 32;
/// Distinct denied targets (host:port) that make those attempts a scan:
/// half of the 16 `recent` holds, so one read during a sweep sees them.
constexpr size_t port_scan_targets = 8;
/// Distinct targets remembered per sandbox (the count shows "N+" past it).
constexpr size_t port_scan_max_targets = 1024;

/// The detection state of one sandbox.
struct port_scan_watch {
  /// Denied targets seen in `recent` ("net 10.0.0.7:22").
  std::set<std::string> targets;
  /// True once the event was raised.
  bool reported = false;
};

/// Folds a fresh read of a sandbox's denials into `w`. Once the sandbox
/// scanned, puts the event first in `d.recent` (dropping the oldest entry
/// to keep at most 16). True only on the read that raised the event.
bool observe_port_scan(port_scan_watch& w, denial_counts& d);

/// Port scans raised on this node, ever (the node metric
/// dsec_port_scans_total).
std::atomic<uint64_t>& port_scans_total();

} // namespace dsec
