// The owner of a request_id (see request_owner.hpp).
#include "policy/request_owner.hpp"

#include <functional>

namespace dsec::placement {

const member_info* request_owner(const std::vector<member_info>& view, const std::string& key) {
  // The same hash as rendezvous() (placement_policy.cpp), so keys keep the
  // node they had while membership is stable.
  std::hash<std::string> h;
  const member_info* best = nullptr;
  size_t best_w = 0;
  for (auto& m : view) {
    if (m.state == "left" || (m.state == "alive" && !m.accepting))
      continue;
    size_t w = h(m.id + "\x1f" + key);
    if (!best || w > best_w || (w == best_w && m.id < best->id)) {
      best = &m;
      best_w = w;
    }
  }
  return best;
}

std::string owner_unreachable(const member_info& owner, const std::string& key) {
  if (owner.state == "alive")
    return {};
  return "create: request_id \"" + key.substr(0, 80) + "\" belongs to node " + owner.id
         + ", which is unreachable (" + owner.state
         + " in this node's view: crashed, stalled or cut off by a partition); retry later"
           " with the same request_id";
}

} // namespace dsec::placement
