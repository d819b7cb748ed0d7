// The placement actor: this node's front door, published on --listen and used
// by the gateway. It speaks the lifecycle protocol (actors/interfaces.hpp), so
// the Python SDK, the gateway and peer nodes all send it the same messages,
// and it decides where each one runs:
//
//   - create: the placement ring over the gossip view
//     (policy/placement_ring.hpp; best-of-k, policy/placement_policy.hpp, on
//     request); the chosen node's lifecycle admits or refuses, a refusal moves on to
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
#include <set>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"
#include "actors/peer_links.hpp"
#include "actors/peer_watch.hpp"
#include "policy/placement_ledger.hpp"
#include "policy/placement_policy.hpp"
#include "policy/placement_ring.hpp"

namespace dsec {

/// State of the placement actor.
struct placement_state {
  static inline const char* name = "placement";
  node_context_ptr ctx;
  lifecycle_actor lifecycle;
  /// Serve peers' image requests and this node's function calls.
  image_fetch_actor fetch;
  fncall_actor fncall;
  /// The gossip view (self included), pushed by the gossip actor.
  std::vector<member_info> view;
  /// Connections to peers' placement actors (actors/peer_links.hpp).
  peer_links<placement_actor> peers;
  /// Creates sent to each node since its last load report (anti-herding).
  placement::ledger placed;
  placement::policy policy;
  std::mt19937_64 rng{std::random_device{}()};
  /// Suspect peers with a pending check of their calls in flight (issue 28).
  std::set<std::string> suspect_checks;
  /// Liveness checks of peers while calls to them wait (issue 28).
  peer_watch watch;
  /// This node's place on the placement ring (policy/placement_ring.hpp).
  placement::ring_cursor ring;
};

using placement_actor_ptr = placement_actor::stateful_pointer<placement_state>;

/// The placement actor's behavior. Until the gossip actor pushes a view, the
/// node knows only itself and serves everything locally. `fetch` and `fncall`
/// may be null (tests): their rows then answer `unavailable`.
placement_actor::behavior_type placement_behavior(placement_actor_ptr self, node_context_ptr ctx,
                                                  lifecycle_actor lifecycle,
                                                  image_fetch_actor fetch, fncall_actor fncall);

// -- for the trajectory rows (actors/sandbox_replay.cpp) -------------------------

/// The owner of `id` if it is a live peer, else empty (this node serves it).
std::string live_owner(placement_actor_ptr self, const std::string& id);

/// Asks `node` for `id`'s log (traj_atom); `done` gets the text or the error.
void ask_trajectory(placement_actor_ptr self, const std::string& node, const std::string& id,
                    int64_t since, std::function<void(expected<std::string>)> done);

/// Asks `node` to rebuild `id` (replay_atom); `done` gets the new sandbox.
void ask_replay(placement_actor_ptr self, const std::string& node, const std::string& id,
                int64_t upto, caf::duration timeout,
                std::function<void(expected<sandbox_info>)> done);

} // namespace dsec
