// One metrics sample of a sandbox (see sandbox_metrics.hpp).
#include "actors/sandbox_metrics.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/sandbox_ops.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

/// One sample from the backend's usage figures; moves `prev` on. CPU is a
/// share of the sandbox's cores over the time since the previous sample.
sandbox_metric metric_of(const sandbox_actor_state& st, const usage_sample& u, cpu_mark& prev) {
  sandbox_metric m;
  m.timestamp_ms = now_ms();
  m.cpu_count = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.spec.cpu)));
  m.mem_used = u.resident_bytes;
  m.mem_total = st.spec.memory_mb << 20;
  auto since_ms = prev.cpu_ns < 0 ? st.info.created_at_ms : prev.at_ms;
  auto used_ns = u.cpu_ns - std::max<int64_t>(prev.cpu_ns, 0);
  auto wall_ns = static_cast<double>(m.timestamp_ms - since_ms) * 1e6 * std::max(st.spec.cpu, 0.01);
  if (wall_ns > 0 && used_ns > 0)
    m.cpu_used_pct = std::min(100.0, std::round(10'000.0 * used_ns / wall_ns) / 100.0);
  prev = {u.cpu_ns, m.timestamp_ms};
  return m;
}

} // namespace

void sample_metrics(sandbox_actor_ptr self, caf::response_promise rp,
                    std::shared_ptr<cpu_mark> prev) {
  auto& st = self->state;
  if (!st.sb || st.destroying)
    return rp.deliver(to_caf(not_running(st)));
  ++st.inflight;
  run_blocking(self, *st.ctx->pool, [sb = st.sb] { return sb->usage(); },
               [self, rp, prev](expected<usage_sample>& u) mutable {
                 expected<sandbox_metric> out =
                   u ? expected<sandbox_metric>{metric_of(self->state, *u, *prev)}
                     : expected<sandbox_metric>{u.err()};
                 finish_op(self, rp, out);
               });
}

} // namespace dsec
