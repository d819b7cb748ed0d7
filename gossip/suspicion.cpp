// Suspicion timing: the pure timeout formulas and the per-member record.
#include "gossip/suspicion.hpp"

#include <algorithm>
#include <cmath>

namespace dsec::gossip {

time_ms suspicion_min_timeout(double mult, size_t n, time_ms probe_interval) {
  double scale = std::max(1.0, std::log10(std::max<double>(1.0, static_cast<double>(n))));
  double ms = mult * scale * static_cast<double>(probe_interval.count());
  return time_ms{static_cast<int64_t>(std::floor(ms))};
}

time_ms suspicion_min_timeout(double mult, size_t n, time_ms probe_interval, time_ms cap) {
  time_ms scaled = suspicion_min_timeout(mult, n, probe_interval);
  time_ms floor = suspicion_min_timeout(mult, 1, probe_interval);
  return std::max(floor, std::min(scaled, cap));
}

time_ms suspicion_timeout(size_t confirmations, size_t k, time_ms min, time_ms max) {
  if (k == 0 || max <= min)
    return min;
  double frac = std::log(static_cast<double>(confirmations) + 1.0)
                / std::log(static_cast<double>(k) + 1.0);
  double raw = static_cast<double>(max.count())
               - frac * static_cast<double>((max - min).count());
  auto t = time_ms{static_cast<int64_t>(std::floor(raw))};
  return std::max(t, min);
}

size_t suspicion_expected_confirmations(size_t k, size_t n) {
  return (n < 2 || n - 2 < k) ? 0 : k;
}

suspicion::suspicion(std::string from, size_t k, time_ms min, time_ms max, time_ms start)
    : from_(std::move(from)), k_(k), min_(min), max_(max), start_(start),
      deadline_(start + suspicion_timeout(0, k, min, max)) {}

bool suspicion::confirm(const std::string& from) {
  if (confirmers_.size() >= k_ || from == from_ || !confirmers_.insert(from).second)
    return false;
  deadline_ = start_ + suspicion_timeout(confirmers_.size(), k_, min_, max_);
  return true;
}

} // namespace dsec::gossip
