// DSec's scale unit in simulation (issue 28 part 3): the gossip simulation
// (gossip/simulation.hpp) of N nodes, and on top of it the creates of a
// trainer's burst placed by the REAL placement policy (policy/placement_policy
// plan() with the placement actor's in-flight ledger, policy/placement_ledger)
// over each entry node's own gossip view, refreshed as the gossip actor pushes
// it (every 250 ms). Each node is a small model of a real one: it admits a
// create while it holds fewer than `capacity` sandboxes (the lifecycle's count
// and memory admission; a refusal sends the create to the next candidate, as
// the placement actor does), a create takes `create_ms` during which it counts
// as `creating`, and it reports sandboxes, creating, free memory and CPU in its
// load report every max(1 s, N x 20 ms), as the gossip actor does.
//
// Phases: everyone joins; a burst fills the cluster to `per_node` sandboxes
// per node at `rate` creates/s from random entry nodes; churn at the same
// rate (deletes + creates) while one node is killed and `joiners` fresh nodes
// join; then datagram loss (false deaths, and a kill detected under loss).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstddef>

#include "gossip/member.hpp"
#include "policy/placement_policy.hpp"

namespace dsec::scale {

/// Shape of a scale-unit run; the defaults are DSec's scale unit.
struct options {
  size_t nodes = 160;
  /// Sandboxes per node the burst fills the cluster to (512,000 at 160).
  size_t per_node = 3200;
  /// A node's admission limit in sandboxes: 25% above the fill, so a node
  /// refuses only when placement piles onto it.
  size_t capacity = 4000;
  /// Creates per second across the cluster, from random entry nodes.
  double rate = 5000;
  /// Time a node spends on one create: base + uniform jitter.
  int64_t create_ms = 150;
  int64_t create_jitter_ms = 100;
  /// Seconds of churn (deletes and creates at `rate`) after the fill.
  int64_t churn_s = 30;
  /// Fresh nodes that join during churn.
  size_t joiners = 4;
  /// Datagram loss of the loss phase, and its length.
  double loss = 0.05;
  int64_t loss_s = 60;
  uint64_t seed = 1;
  placement::policy policy;
  /// Lets tests shorten the gossip timers' scale (0 = gossip defaults).
  double suspicion_mult = 0;
};

/// Runs the whole scenario and returns its measurements (see the file comment).
nlohmann::json run(const options& o);

} // namespace dsec::scale
