// Nearest-rank percentiles and latency summaries.
#include "bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsec::bench {

double percentile(const std::vector<double>& sorted, double p) {
  auto n = sorted.size();
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  return sorted[std::min(n - 1, rank == 0 ? 0 : rank - 1)];
}

latency_summary summarize(std::vector<double> ms) {
  latency_summary s;
  if (ms.empty())
    return s;
  std::sort(ms.begin(), ms.end());
  s.n = ms.size();
  s.p50 = percentile(ms, 50);
  s.p90 = percentile(ms, 90);
  s.p99 = percentile(ms, 99);
  s.mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(s.n);
  s.min = ms.front();
  s.max = ms.back();
  return s;
}

double round3(double v) {
  return std::round(v * 1000.0) / 1000.0;
}

nlohmann::json to_json(const latency_summary& s) {
  return {{"n", s.n},           {"p50", round3(s.p50)},   {"p90", round3(s.p90)},
          {"p99", round3(s.p99)}, {"mean", round3(s.mean)}, {"min", round3(s.min)},
          {"max", round3(s.max)}};
}

} // namespace dsec::bench
