// The gossip actor: runs this node's SWIM membership (gossip/memberlist) over
// UDP (gossip/udp_transport) and keeps the placement actor's view current.
//
//   - a receiver thread blocks on the socket and hands each datagram to the
//     actor (packet_atom); the actor alone touches the memberlist;
//   - a 20 ms tick drives the protocol timers (probe 200 ms, timeouts 100 ms);
//   - every second it measures this node's load (free memory as admission
//     sees it, node_status::memory_free_mb; loadavg, the
//     lifecycle's counts and layers) and publishes it through the gossip;
//   - after any change it pushes the view (std::vector<member_info>) to the
//     placement actor.
//
// Protocol (actors/interfaces.hpp, gossip_actor): (nodes_atom) ->
// std::vector<member_info>; (leave_atom) -> bool, after the leave had time to
// spread (SIGTERM).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/typed_response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/node_context.hpp"
#include "gossip/memberlist.hpp"
#include "actors/interfaces.hpp"
#include "gossip/udp_transport.hpp"

namespace dsec {

/// State of the gossip actor.
struct gossip_state {
  static inline const char* name = "gossip";
  node_context_ptr ctx;
  lifecycle_actor lifecycle;
  placement_actor placement;
  std::shared_ptr<gossip::udp_transport> net;
  std::unique_ptr<gossip::memberlist> members;
  std::thread receiver;
  bool load_inflight = false;
  /// Load changes not yet pushed to placement, and when the view last went.
  bool view_dirty = false;
  std::chrono::steady_clock::time_point view_pushed_at;
  bool leaving = false;
  /// Callers of (leave_atom), answered once the leave had time to spread.
  std::vector<caf::typed_response_promise<bool>> leave_waiters;

  ~gossip_state();
};

using gossip_actor_ptr = gossip_actor::stateful_pointer<gossip_state>;

/// `net` is bound already (the node fails at start if the port is taken);
/// `seeds` are the --join addresses.
gossip_actor::behavior_type gossip_behavior(gossip_actor_ptr self, node_context_ptr ctx,
                                            lifecycle_actor lifecycle, placement_actor placement,
                                            std::shared_ptr<gossip::udp_transport> net,
                                            std::vector<std::string> seeds);

} // namespace dsec
