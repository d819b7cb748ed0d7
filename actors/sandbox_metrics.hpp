// The sandbox actor's metrics operation (ops::sbmetrics_op): one sample of
// what the sandbox uses now, its CPU since the previous sample and its
// memory, read from the backend's cgroup on the worker pool, so a paused
// sandbox stays paused.
#pragma once

#include <cstdint>
#include <memory>

#include <caf/fwd.hpp>

#include "actors/sandbox.hpp"

namespace dsec {

/// Where the previous metrics sample left the sandbox's CPU time.
struct cpu_mark {
  int64_t cpu_ns = -1; // none yet: since the sandbox started
  int64_t at_ms = 0;
};

/// Answers `rp` with one sample; moves `prev` on.
void sample_metrics(sandbox_actor_ptr self, caf::response_promise rp,
                    std::shared_ptr<cpu_mark> prev);

} // namespace dsec
