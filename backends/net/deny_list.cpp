// The kernel order of allow and deny rules (deny_list.hpp).
#include "backends/net/deny_list.hpp"

namespace dsec::net {

expected<std::vector<rule>> ordered_rules(std::vector<rule> narrow,
                                          const std::vector<rule>& deny,
                                          const std::vector<rule>& catch_all, size_t max) {
  if (deny.size() + catch_all.size() > max)
    return invalid_argument("network: " + std::to_string(deny.size()) + " deny and "
                            + std::to_string(catch_all.size())
                            + " catch-all allow rules; the kernel holds " + std::to_string(max)
                            + " per sandbox");
  size_t room = max - deny.size() - catch_all.size();
  if (narrow.size() > room)
    narrow.resize(room);
  auto out = std::move(narrow);
  out.reserve(out.size() + deny.size() + catch_all.size());
  out.insert(out.end(), deny.begin(), deny.end());
  out.insert(out.end(), catch_all.begin(), catch_all.end());
  return out;
}

rule deny_rule(const allow_entry& e) {
  rule r{e.addr, e.prefix, e.port};
  r.deny = true;
  return r;
}

} // namespace dsec::net
