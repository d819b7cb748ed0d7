// The measurement driver: runs the same metrics on every bench_target and
// computes dsec's ratios against each peer. Metric names (flat keys in each
// system's "metrics" object, null when not applicable):
//   create_first_output_p50_ms / _p90_ms / _p99_ms   create + first output of echo
//   exec_true_p50_ms / _p99_ms                        exec of `true` in a running sandbox
//   burst_create_per_s / burst_destroy_per_s          --count sandboxes, --inflight parallel
//   idle_mb_per_sandbox                               manager growth + in-sandbox PSS
#pragma once

#include <nlohmann/json.hpp>

#include "bench/options.hpp"
#include "bench/target.hpp"

namespace dsec::bench {

/// Runs every metric on `t`; returns {"metrics":{…}, "detail":{…}, "errors":[…], "notes":{…}}.
nlohmann::json run_all(bench_target& t, const burst_options& o);

/// dsec versus each other system in `systems` (keyed by name): latency
/// speedups are peer/dsec, rate ratios dsec/peer, memory ratio peer/dsec, so
/// every ratio above 1 favours dsec. Missing values give null.
nlohmann::json compute_ratios(const nlohmann::json& systems);

} // namespace dsec::bench
