// The node supervisor: the root of a node's actors. It spawns and monitors the
// lifecycle, reclaim, placement, gossip and gateway actors, runs the orderly shutdown
// (leave the cluster, destroy every sandbox, then stop the children) and takes
// the node down when a child dies unexpectedly, so a broken node exits instead
// of answering half its API.
//
//   (get_atom)      -> (caf::actor placement, caf::actor gateway): the front
//                      door to publish on --listen, and the REST gateway
//   (shutdown_atom) -> nothing; the supervisor quits when shutdown is done
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/node_context.hpp"

namespace dsec {

/// State of the node supervisor.
struct supervisor_state {
  static inline const char* name = "node";
  node_context_ptr ctx;
  caf::actor lifecycle;
  /// Measures sandboxes and host memory, reclaims idle ones (actors/reclaim.hpp).
  caf::actor reclaim;
  caf::actor placement;
  /// Null when the node runs without a gossip socket (tests).
  caf::actor gossip;
  caf::actor gateway;
  bool stopping = false;
};

using supervisor_actor_ptr = caf::stateful_actor<supervisor_state>*;

/// Spawns the node's actors; quits normally after shutdown, with an error if
/// a child died on its own.
caf::behavior node_supervisor(supervisor_actor_ptr self, node_context_ptr ctx);

} // namespace dsec
