// The vocabulary of gossip membership: a member's state (alive, suspect, dead,
// left), the load report each node disseminates about itself, a member as one
// node sees it, and the events a node reports to its owner (the gossip actor)
// when its view changes. Plain structs, no behaviour beyond names; the rules
// that move a member between states live in memberlist (precedence.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dsec::gossip {

/// Steady time in milliseconds since an arbitrary epoch; every entry point of the
/// library takes it as an argument, so tests and simulations drive the clock.
using time_ms = std::chrono::milliseconds;

/// Raw bytes of one datagram or stream message.
using bytes = std::vector<uint8_t>;

/// A member's state in SWIM. Wire values: append only, never renumber.
enum class member_state : uint8_t {
  /// Answers probes (or nobody has noticed otherwise yet).
  alive = 0,
  /// Missed a probe; will be declared dead unless it refutes in time.
  suspect = 1,
  /// Declared dead after its suspicion timed out.
  dead = 2,
  /// Left gracefully; never suspected, never probed.
  left = 3,
};

/// "alive", "suspect", "dead", "left" (or "unknown" for values from newer peers).
const char* to_string(member_state s);

/// What a node says about its own capacity; placement reads it from the view.
struct load_report {
  /// Free memory in MiB, as measured by the node (MemAvailable).
  uint64_t free_memory_mb = 0;
  /// 1-minute load average divided by the number of cores (1.0 = saturated).
  double cpu_load = 0;
  /// Sandboxes on the node, any state but stopped.
  uint32_t sandboxes = 0;
  /// Sandboxes being created right now.
  uint32_t creating = 0;
  /// False while the node drains: it takes no new sandboxes.
  bool accepting = true;
  /// Digests of layers the node holds locally ("sha256:..."), at most
  /// config::max_layers_in_report of them (the rest are dropped).
  std::vector<std::string> layers;
  /// Set by the owning node: grows by one with each report it publishes.
  uint64_t seq = 0;

  friend bool operator==(const load_report& a, const load_report& b) {
    return a.free_memory_mb == b.free_memory_mb && a.cpu_load == b.cpu_load
           && a.sandboxes == b.sandboxes && a.creating == b.creating
           && a.accepting == b.accepting && a.layers == b.layers && a.seq == b.seq;
  }
};

/// One member as the local node sees it.
struct member {
  /// Node id, unique in the cluster (the node part of sandbox ids).
  std::string id;
  /// "host:port" of the node's gossip endpoint.
  std::string address;
  /// Bumped only by the node itself, to refute suspicion or to leave.
  uint64_t incarnation = 0;
  member_state state = member_state::alive;
  /// The newest load report heard from the node.
  load_report load;
  /// Incarnation the node had when it published `load`: a restarted node's
  /// reports (seq from 1 again) win over its previous life's by incarnation.
  uint64_t load_incarnation = 0;
  /// Local time of the last state change (for reaping dead members).
  time_ms state_changed{0};
};

/// What changed in the local view. Wire-free, for the owning actor.
enum class event_kind : uint8_t {
  /// A member appeared (or came back after dead/left).
  joined = 0,
  /// Address, load or suspect -> alive (refuted) changed.
  updated = 1,
  suspect = 2,
  dead = 3,
  left = 4,
};

/// "joined", "updated", "suspect", "dead", "left".
const char* to_string(event_kind k);

/// One change of the view, with the member as it is after the change.
struct event {
  event_kind kind = event_kind::updated;
  member who;
};

} // namespace dsec::gossip
