// Wall-clock reads and exec wait bounds (see clock.hpp).
#include "core/clock.hpp"

#include <cmath>

namespace dsec {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t exec_limit_ms(double timeout_s) {
  if (!(timeout_s > 0))
    return 0;
  return static_cast<int64_t>(std::ceil(timeout_s * 1000));
}

std::optional<std::chrono::milliseconds> exec_wait(double timeout_s,
                                                   std::chrono::milliseconds slack) {
  if (!(timeout_s > 0))
    return std::nullopt;
  return std::chrono::milliseconds{exec_limit_ms(timeout_s)} + slack;
}

std::optional<std::chrono::milliseconds> exec_wait(double timeout_s, hop h) {
  return exec_wait(timeout_s, h == hop::peer ? exec_slack_inner : exec_slack_outer);
}

} // namespace dsec
