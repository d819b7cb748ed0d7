// The memberlist's view as the rest of the node sees it: one member_info
// (core/types.hpp) per member, with its state, incarnation and load. The
// gossip actor hands it to placement and answers GET /v1/nodes with it; the
// scale-unit simulation (bench/gossip/scale_unit.cpp) feeds the same view
// to the same placement policy.
#pragma once

#include <vector>

#include "core/types.hpp"
#include "gossip/member.hpp"

namespace dsec::gossip {

/// The members as member_info values, in the memberlist's order.
std::vector<member_info> to_member_infos(const std::vector<member>& members);

} // namespace dsec::gossip
