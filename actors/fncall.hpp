// The fncall actor: the node's door to the FnCall warm pool
// (backends/fncall/fncall_pool.hpp). It owns the pool, takes
// (fncall_atom, fncall_request) from placement and answers exec_result or an
// error of category "dsec". Detached: the pool's shutdown (destroying the
// warm sandboxes) blocks, and must block nobody else.
//
//   (fncall_atom, fncall_request)  -> exec_result | error
//   INTERNAL: (cont_atom, continuation) from the pool's threads
//
// The node registers it in the actor registry under fncall_atom, so placement
// finds it without a handle in its spawn arguments.
#pragma once

#include <caf/fwd.hpp>

#include "actors/node_context.hpp"

namespace dsec {

/// Spawns the fncall actor (detached) and registers it as fncall_atom.
/// Environment overrides for tests and benches: DSEC_FNCALL_MIN_WORKERS,
/// DSEC_FNCALL_MAX_WORKERS, DSEC_FNCALL_IDLE_MS, DSEC_FNCALL_LAYER,
/// DSEC_FNCALL_PREWARM=1 (warm at start, not on the first call).
caf::actor spawn_fncall_actor(caf::actor_system& sys, node_context_ptr ctx);

} // namespace dsec
