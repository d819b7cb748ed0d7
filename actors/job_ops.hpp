// Job-level pause and resume (core/job.hpp): every sandbox whose labels
// include the selector, on every live node, at once.
//
//   placement (front door): (job_atom, labels, bool pause) -> job_result for
//     the cluster: its own lifecycle and every alive or suspect peer's
//     placement (job_atom, labels, pause, true) in parallel; a node that
//     fails or does not answer in time is one error item naming it.
//   lifecycle: (job_atom, labels, bool pause) -> job_result for this node:
//     one pause (or resume) request per matching sandbox actor, all sent at
//     once; each actor runs its own on the worker pool, so a node's pauses run
//     side by side and no actor waits. A sandbox in the middle of another
//     pause, resume or snapshot (conflict) is asked again shortly, so two
//     overlapping job calls both end well. Idempotent: a sandbox already
//     paused (resumed) answers at once and counts as done.
//
// Both refuse an empty selector (invalid_argument): never everything by accident.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <caf/fwd.hpp>

#include "actors/lifecycle.hpp"
#include "actors/placement.hpp"
#include "core/job.hpp"

namespace dsec {

/// The lifecycle actor's part: this node's sandboxes matching `labels`.
caf::result<job_result> run_job_local(lifecycle_actor_ptr self,
                                      const std::map<std::string, std::string>& labels,
                                      bool pause);

/// How the placement actor asks one peer for its part (job_atom, labels,
/// pause, true): `done` runs once, inside the placement actor, with the
/// peer's answer or an error.
using job_peer_ask = std::function<void(const std::string& node,
                                        std::function<void(expected<job_result>)> done)>;

/// The placement actor's part: this node and every live peer.
caf::result<job_result> run_job_cluster(placement_actor_ptr self,
                                        const std::map<std::string, std::string>& labels,
                                        bool pause, const job_peer_ask& ask);

} // namespace dsec
