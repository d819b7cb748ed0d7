// A node's runtime: builds the node context (store, mounts, backend, worker
// pool), starts the actor system with the lifecycle and gateway actors, the
// REST server and the native port, and runs until SIGTERM or SIGINT.
#pragma once

#include "actors/node_context.hpp"

namespace dsec {

/// Runs a node until it is told to stop; returns the process exit code.
/// `ready` (if set) is called once the REST port is serving.
int run_node(node_config cfg);

} // namespace dsec
