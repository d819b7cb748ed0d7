// The placement actor: this node's front door, published on --listen and used
// by the gateway. It speaks the lifecycle protocol (actors/interfaces.hpp), so
// the Python SDK, the gateway and peer nodes all send it the same messages,
// and it decides where each one runs:
//
//   - create: best-of-k over the gossip view (actors/placement_policy.hpp);
//     the chosen node's lifecycle admits or refuses, a refusal moves on to
//     the next candidate, up to the hop limit. A forwarded create is pinned
//     (`spec.node` = the target), so the receiver serves it locally or
//     refuses: it never forwards again. `"node": ID` pins a user's create.
//   - everything about one sandbox goes to its owner, named by the id's node
//     part: local ones to the lifecycle actor, others to the owner's
//     placement actor over CAF (connections made on demand, monitored). An
//     owner the gossip view holds dead or gone answers `lost`.
//   - list answers cluster-wide (each live peer is asked for its own list);
//     nodes answers the gossip view.
//
// Forwarded calls are tracked per peer: when a peer's connection drops, every
// call in flight to it fails at once with `unavailable`, so no caller waits on
// a dead node.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/node_context.hpp"
#include "actors/placement_policy.hpp"

namespace dsec {

/// A connection to one peer's placement actor.
struct peer_link {
  caf::actor handle;
  bool connecting = false;
  /// Calls that wait for the connection: run with the handle, or with an error.
  std::vector<std::function<void(const caf::actor&, const error&)>> waiting;
  /// Calls in flight to the peer: failed at once if its connection drops.
  std::unordered_map<uint64_t, std::function<void(const error&)>> inflight;
};

/// State of the placement actor.
struct placement_state {
  static inline const char* name = "placement";
  node_context_ptr ctx;
  caf::actor lifecycle;
  /// The gossip view (self included), pushed by the gossip actor.
  std::vector<member_info> view;
  std::unordered_map<std::string, peer_link> peers;
  /// Creates sent to each node since its last load report (anti-herding).
  std::map<std::string, int64_t> placed;
  placement::policy policy;
  std::mt19937_64 rng{std::random_device{}()};
  uint64_t next_ticket = 0;
};

using placement_actor_ptr = caf::stateful_actor<placement_state>*;

/// The placement actor's behavior. Until the gossip actor pushes a view, the
/// node knows only itself and serves everything locally.
caf::behavior placement_actor(placement_actor_ptr self, node_context_ptr ctx,
                              caf::actor lifecycle);

} // namespace dsec
