// Ring placement (issue 28 part 3): how a burst spreads evenly from its first
// second, when every entry node places on load reports that are seconds old.
//
// Every node orders the live, accepting members the same way (a stable hash
// of the id: the ring). An entry node walks the ring from its own position,
// one step per create: its n-th create goes to the n-th member after itself.
// That is sampling without replacement per entry, and because the entries
// start at their own, evenly spread positions, the sum over all entries is
// even too: 160 entries placing ~31 creates/s each give every node ~31/s
// within a few creates, where picking at random (or best-of-k over stale
// reports, which is no better) gives Poisson spread (max/mean 1.5 at 31 per
// node). No report is needed for this, so it holds before the first report
// of the burst has arrived. One entry alone (a trainer talking to one node)
// is plain round robin.
//
// The reports still matter for what they know well: a member whose last
// report says the sandbox does not fit, or which holds far more than the
// cluster mean (skip_over_mean), is stepped over; the next ring member takes
// its turn. The order after the ring's candidate: the next eligible ring
// member (a refusal's retry, one extra hop), then the rest of the cluster by
// score (placement_policy.hpp), up to the hop limit.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "policy/placement_ledger.hpp"
#include "policy/placement_policy.hpp"

namespace dsec::placement {

/// One entry node's place on the ring: how many steps past its own
/// position its next create goes. The placement actor keeps one; so does
/// each simulated entry node (bench/gossip/scale_unit.cpp).
class ring_cursor {
 public:
  /// Steps taken since this node started placing.
  uint64_t turn() const { return turn_; }
  /// The create went `steps` ring positions past the cursor (stepping
  /// over members that did not qualify); the next one starts after it.
  void advance(uint64_t steps) { turn_ += steps; }

 private:
  uint64_t turn_ = 0;
};

/// The position key of member `id` on the ring (FNV-1a: the same at every
/// node and in every build, unlike std::hash).
uint64_t ring_key(const std::string& id);

/// Live, accepting member ids in ring order (by ring_key, then id).
std::vector<std::string> ring_order(const std::vector<member_info>& view);

/// Node ids to try for `spec` by the ring (see the file comment); advances
/// `cursor` past the first. `placed` is this node's in-flight ledger. Empty if
/// no member is a candidate.
std::vector<std::string> plan_ring(const std::vector<member_info>& view,
                                   const std::string& self_id, const sandbox_spec& spec,
                                   const std::map<std::string, int64_t>& placed,
                                   const policy& pol, ring_cursor& cursor);

/// The order for a create, by `pol.spread`: the ring, or best-of-k sampling
/// (plan()). What the placement actor and the scale-unit simulation call.
std::vector<std::string> place(const std::vector<member_info>& view, const std::string& self_id,
                               const sandbox_spec& spec, const ledger& placed,
                               const policy& pol, ring_cursor& cursor, std::mt19937_64& rng);

} // namespace dsec::placement
