// Where a create should go, as pure functions over the gossip view (no CAF, so
// unit tests link it alone). The placement actor asks `plan()` for an order of
// nodes to try and walks it: the first node that admits the sandbox keeps it.
//
// Best-of-k (power of k choices): sample k live, accepting members (this node
// always among them, so a node that fits serves locally without a hop), score
// each, try them best first; then the rest of the cluster by score, so a full
// sample does not fail a create the cluster has room for. At most
// `max_attempts` nodes are tried: the hop limit.
//
// Score (higher is better), each term in [0, 1] before its weight:
//   1.0 · free memory      (after this sandbox's expected need, relative to the
//                           best candidate; free memory is what the node's
//                           measured admission still gives, see reclaim_policy.hpp)
//   1.0 · idle CPU         (1 - load per core, clamped)
//   1.0 · spread           (1 / (1 + (sandboxes + creating + placed) / 16)):
//                           placed = creates sent there since its last report,
//                           so a burst spreads before the reports catch up
//   0.5 · layer locality   (share of the spec's layers the node already mounts:
//                           no fetch, warm page cache; a tie-breaker, not a
//                           magnet, since layers mount from a shared store)
//   0.05 if local          (ties stay local: one hop fewer)
// A node whose free memory would not hold the sandbox scores below every node
// that would, but stays in the order (reports are up to a second old).
//
// This is spread_mode::sample. The default, spread_mode::ring, takes the
// first candidate from the placement ring instead (placement_ring.hpp: even
// under a burst from many entry nodes) and uses score() only for the rest.
//
// Creates with a request_id go by rendezvous hashing instead, so a retry of
// the same request lands on the same node while membership is stable (that
// node answers it idempotently).
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace dsec::placement {

/// Tunables; the defaults fit clusters of 3 to 1,000 nodes.
struct policy {
  /// Sample size (this node and k-1 others): 2 already avoids herding (power
  /// of two choices). Larger finds layer locality more often but herds on
  /// stale reports: in the scale-unit simulation (160 nodes, reports every
  /// 3.2 s, 5,000 creates/s, bench/README.md) k=3 put up to 2.1x the mean on
  /// one node early in a burst and k=5 3.3x, where k=2 stays at 1.6-1.7x,
  /// which is what picking nodes at random gives there.
  size_t k = 2;
  /// Hop limit: nodes tried per create before giving up with 429.
  size_t max_attempts = 8;
  /// How a create's first candidate is chosen (issue 28 part 3): `ring`
  /// (policy/placement_ring.hpp: even from a burst's first second, every
  /// create but 1 in N forwarded once) or `sample` (best-of-k above: 1 in k
  /// forwarded, as uneven as random placement until reports catch up).
  enum class spread_mode { ring, sample };
  spread_mode spread = spread_mode::ring;
  /// The ring steps over a member whose last report plus the creates sent to
  /// it since holds more than mean * (1 + skip_over_mean) + skip_over_abs.
  /// Loose on purpose: during a burst, reports 3.2 s apart differ by ~100
  /// sandboxes per node at 31 creates/s while the nodes are even; a tighter
  /// bound would step over whoever reported last (herding, as k=3 did). Too
  /// loose only leaves a truly heavy node its turn, as random placement would.
  double skip_over_mean = 0.5;
  int64_t skip_over_abs = 32;
};

/// `ids` ordered by score(), best first (ties keep their order); `placed`
/// as for plan().
std::vector<std::string> order_by_score(const std::vector<const member_info*>& ids,
                                        const std::string& self_id, const sandbox_spec& spec,
                                        const std::map<std::string, int64_t>& placed,
                                        int64_t best_free_mb);

/// The largest free memory among `candidates` after `spec`'s expected need.
int64_t best_free_after(const std::vector<const member_info*>& candidates,
                        const sandbox_spec& spec);

/// The score of placing `spec` on member `m` (see the file comment).
/// `placed` counts creates this node sent to `m` since its last load report;
/// `best_free_mb` is the largest free memory among the candidates.
double score(const member_info& m, const sandbox_spec& spec, int64_t placed, bool local,
             int64_t best_free_mb);

/// Node ids to try for `spec`, in order. `view` is every member (any state);
/// only alive, accepting ones are candidates. Empty if there is none.
std::vector<std::string> plan(const std::vector<member_info>& view, const std::string& self_id,
                              const sandbox_spec& spec,
                              const std::map<std::string, int64_t>& placed, const policy& pol,
                              std::mt19937_64& rng);

/// Live, accepting member ids ordered by rendezvous hash of `key`.
std::vector<std::string> rendezvous(const std::vector<member_info>& view, const std::string& key);

} // namespace dsec::placement
