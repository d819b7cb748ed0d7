// The fncall actor: the node's door to the FnCall warm pool
// (backends/fncall/fncall_pool.hpp). It owns the pool, takes
// (fncall_atom, fncall_request) from placement and answers exec_result or an
// error of category "dsec". Detached: the pool's shutdown (destroying the
// warm sandboxes) blocks, and must block nobody else.
//
//   (fncall_atom, fncall_request)  -> exec_result | error
//   INTERNAL: (cont_atom, continuation) from the pool's threads
//
// The node supervisor spawns it and hands placement its handle.
#pragma once

#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"

namespace dsec {

/// Spawns the fncall actor (detached) as a child of `parent` (the node
/// supervisor), which monitors it; its warm sandboxes go when it quits.
/// Environment overrides for tests and benches: DSEC_FNCALL_MIN_WORKERS,
/// DSEC_FNCALL_MAX_WORKERS, DSEC_FNCALL_IDLE_MS, DSEC_FNCALL_LAYER,
/// DSEC_FNCALL_PREWARM=1 (warm at start, not on the first call).
fncall_actor spawn_fncall(caf::local_actor* parent, node_context_ptr ctx);

} // namespace dsec
