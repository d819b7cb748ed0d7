// The in-flight ledger of placement (see placement_ledger.hpp).
#include "policy/placement_ledger.hpp"

#include <unordered_map>

namespace dsec::placement {

void ledger::on_view(const std::vector<member_info>& old, const std::vector<member_info>& view) {
  if (counts_.empty())
    return;
  std::unordered_map<std::string, const member_info*> before;
  before.reserve(old.size());
  for (auto& m : old)
    before.emplace(m.id, &m);
  for (auto& m : view) {
    auto it = before.find(m.id);
    if (it == before.end() || it->second->sandboxes != m.sandboxes
        || it->second->creating != m.creating)
      counts_.erase(m.id);
  }
}

} // namespace dsec::placement
