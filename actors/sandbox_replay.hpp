// The cluster side of the trajectory log: reading a sandbox's log from any
// node, and rebuilding a sandbox from it (POST /v1/sandboxes/{id}/replay).
//
// A call about a sandbox whose owner is a live peer goes to that owner (its
// disk has the log even when --trajectory-dir is not shared). Otherwise, the
// owner being this node, dead, gone, unknown or unreachable (the call to it
// failed with `unavailable`), this node answers from its own --trajectory-dir: with a shared directory any peer serves any log, also of
// a sandbox whose node was lost.
//
// A replay is a short-lived actor (the "replay driver") on the node that
// serves it. It reads the source's records, creates a sandbox with the
// source's spec (request_id and node pin dropped: the rebuild must be a new
// sandbox, placed anywhere), logs `rebuilt` (source id, up to seq) as the new
// sandbox's seq 1, then re-applies every file write and exec up to that seq,
// in order, through the placement actor as any client would (so the new log
// records them too, steps included, and a trainer fast-forwards on the new
// sandbox). Exec results are not compared (commands may be nondeterministic);
// an exec that fails to run, or a write whose content the log did not keep,
// stops the replay: the half-built sandbox is destroyed and the caller gets
// the error naming the seq.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <caf/fwd.hpp>

#include "actors/placement.hpp"

namespace dsec {

/// (traj_atom, id, since) on the placement actor -> std::string (NDJSON lines
/// with seq > since; all for since < 0) | error.
caf::result<std::string> placement_trajectory(placement_actor_ptr self, const std::string& id,
                                              int64_t since);

/// (replay_atom, id, upto) on the placement actor -> sandbox_info of the new
/// sandbox | error; upto < 0 = the whole log.
caf::result<sandbox_info> placement_replay(placement_actor_ptr self, const std::string& id,
                                          int64_t upto);

} // namespace dsec
