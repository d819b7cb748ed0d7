// The node supervisor: the root of a node's actors. It spawns and monitors
// every one of them (lifecycle, reclaim, fncall, image fetch, placement,
// gossip, gateway) and hands each the handles it talks to, so no actor finds
// another through the registry. It runs the orderly shutdown (leave the
// cluster, destroy every sandbox, stop the fncall pool and wait for it, then
// stop the rest) and takes the node down when a child dies unexpectedly, so a
// broken node exits instead of answering half its API.
//
// Protocol (actors/interfaces.hpp, supervisor_actor):
//   (get_atom)      -> (placement_actor, gateway_actor, image_fetch_actor):
//                      the front door to publish on --listen, the REST
//                      gateway, and the image-fetch actor the layer source's
//                      fetcher asks
//   (shutdown_atom) -> nothing; the supervisor quits when shutdown is done
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"

namespace dsec {

/// State of the node supervisor.
struct supervisor_state {
  static inline const char* name = "node";
  node_context_ptr ctx;
  lifecycle_actor lifecycle;
  /// Measures sandboxes and host memory, reclaims idle ones (actors/reclaim.hpp).
  reclaim_actor reclaim;
  /// The FnCall warm pool (detached) and layers from peers.
  fncall_actor fncall;
  image_fetch_actor fetch;
  placement_actor placement;
  /// Null when the node runs without a gossip socket (tests).
  gossip_actor gossip;
  gateway_actor gateway;
  bool stopping = false;
  /// The stop waits for fncall's down message, then quits with this reason.
  bool waiting_for_fncall = false;
  caf::error final_reason;
};

using supervisor_actor_ptr = supervisor_actor::stateful_pointer<supervisor_state>;

/// Spawns the node's actors; quits normally after shutdown, with an error if
/// a child died on its own.
supervisor_actor::behavior_type node_supervisor(supervisor_actor_ptr self, node_context_ptr ctx);

} // namespace dsec
