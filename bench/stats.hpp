// Latency statistics for the bench: nearest-rank percentiles over a sample of
// milliseconds, a wall-clock stopwatch, and the JSON form of a summary.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsec::bench {

/// Summary of one latency sample, all in milliseconds.
struct latency_summary {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

/// Nearest-rank percentile (`p` in 0..100) of `sorted` (ascending, non-empty):
/// the smallest value with at least p% of the sample at or below it.
double percentile(const std::vector<double>& sorted, double p);

/// Summarizes `ms` (any order). An empty sample gives n = 0 and zeros.
latency_summary summarize(std::vector<double> ms);

/// {"n","p50","p90","p99","mean","min","max"}, values rounded to microseconds.
nlohmann::json to_json(const latency_summary& s);

/// Rounds to 3 decimals (µs for ms values) so the JSON stays readable.
double round3(double v);

/// A steady-clock stopwatch started at construction.
class stopwatch {
 public:
  stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  /// Milliseconds since construction (or the last restart()).
  [[nodiscard]] double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }
  void restart() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

} // namespace dsec::bench
