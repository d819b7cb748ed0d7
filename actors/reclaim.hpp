// The reclaim actor: one per node, spawned and owned by the node supervisor.
// Every --reclaim-interval-ms it measures each running sandbox
// (backends::sandbox::usage()) and the host (/proc/meminfo), finds the idle
// ones (reclaim_policy.hpp) and pushes their cold memory into the node's
// compressed swap (backends::sandbox::reclaim()), largest first, as many
// per pass as its time budget allows (reclaim_policy.hpp). It reports every pass to the lifecycle actor, whose admission,
// GET /v1/sandboxes/{id} and /metrics read it; a create under memory pressure
// asks it to reclaim at once (reclaim_atom) and decides on the fresh sample.
//
// It never blocks a scheduler thread: sampling and reclaim run on the node's
// worker pool and come back as continuations; one pass at a time (`busy`),
// so a slow pass skips ticks instead of piling them up. Paused sandboxes are
// left alone (their pause already reclaimed). A backend that cannot measure
// or reclaim ("not supported") is skipped, logged once per sandbox.
//
// Protocol (actors/interfaces.hpp):
//   (reclaim_atom) -> reclaim::memory_report, after a pass that reclaims every
//                     idle sandbox it may (up to max_per_pass, within twice
//                     the pass budget)
//   INTERNAL: (caf::tick_atom), every interval
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"
#include "policy/reclaim_policy.hpp"

namespace dsec {

/// How the reclaim actor runs (from node_config; tests set the clock and the
/// host reader).
struct reclaim_options {
  reclaim::tunables tun;
  int64_t interval_ms = 1000;
  /// False: measure only (metrics, admission), never call reclaim().
  bool enabled = true;
  /// Unix ms now.
  std::function<int64_t()> clock;
  /// Reads the host's memory; blocking (runs on the pool).
  std::function<reclaim::host_memory()> read_host;
};

/// The options `dsec node` flags ask for, with the real clock and
/// /proc/meminfo.
reclaim_options reclaim_options_from(const node_config& cfg);

/// DSEC_RECLAIM_SAMPLES=N, the sandboxes a pass measures at most
/// (reclaim::tunables::max_samples_per_pass; bench/create_profile.py measures
/// the cap against measuring all, as density.py does the launch template with
/// DSEC_FLAT_OFF): 0 when unset, invalid_argument when not a positive whole
/// number (the node refuses to start).
expected<size_t> reclaim_samples_env();

/// What the reclaim actor keeps per sandbox.
struct reclaim_entry {
  reclaim::tracked t;
  sandbox_state state = sandbox_state::creating;
  sandbox_actor actor;
  std::weak_ptr<backends::sandbox> sb;
  /// Its backend cannot measure or reclaim (logged once).
  bool usage_failed = false;
  bool reclaim_failed = false;
};

/// State of the reclaim actor.
struct reclaim_state {
  static inline const char* name = "reclaim";
  node_context_ptr ctx;
  lifecycle_actor lifecycle;
  reclaim_options opt;
  std::map<std::string, reclaim_entry> sandboxes;
  reclaim::host_memory host;
  int64_t reclaimed_total = 0;
  /// A pass is running; ticks skip, reclaim_atom callers wait.
  bool busy = false;
  /// Callers of (reclaim_atom) for the next squeezing pass.
  std::vector<caf::response_promise> waiters;
  /// Passes finished (tests count them).
  int64_t passes = 0;
};

using reclaim_actor_ptr = reclaim_actor::stateful_pointer<reclaim_state>;

/// Starts ticking at once (the first sample comes before the first create).
reclaim_actor::behavior_type reclaim_behavior(reclaim_actor_ptr self, node_context_ptr ctx,
                                              lifecycle_actor lifecycle, reclaim_options opt);

} // namespace dsec
