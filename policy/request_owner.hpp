// The owner of a create's request_id: the one node that may create the
// sandbox for that key, so the key never yields two live sandboxes, even
// across a partition (issue 28).
//
// The owner is the rendezvous-hash winner of the key over every member of the
// view that has not left: alive, suspect and dead members all keep their
// keys, so both sides of a partition name the same owner (each side still
// lists the other as suspect or dead until gossip reaps it, 30 s after its
// death: gossip/config.hpp dead_reap_timeout). A member that is alive but
// drains (accepting = false) said so itself: its keys go to the next member.
//
// What the placement actor does with it (actors/placement.cpp):
//   - owner alive: the create goes to the owner only; its refusal (full,
//     429) is the answer, never a second node, so a later retry cannot find
//     the owner with room and create a twin;
//   - owner suspect or dead: a retryable 503 naming the owner as unreachable;
//   - no owner (no member at all): the node serves the create itself.
// The limit: a partition that outlasts the reap lets each side forget the
// other and name owners of its own, so a key retried on both sides of such a
// partition can yield two sandboxes.
#pragma once

#include <string>
#include <vector>

#include "core/types.hpp"

namespace dsec::placement {

/// The member that owns `key`, or null if the view has no member that can
/// own one (empty, or every member left or drains).
const member_info* request_owner(const std::vector<member_info>& view, const std::string& key);

/// Why a create with request_id `key` cannot go to `owner` now (its state is
/// not alive), or empty if it can. The text names the key and the node.
std::string owner_unreachable(const member_info& owner, const std::string& key);

} // namespace dsec::placement
