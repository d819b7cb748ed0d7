// Parsing of deny-list entries (deny_list.hpp): the allow-list's address
// grammar, without names.
#include "core/deny_list.hpp"

#include <algorithm>

#include "core/egress_sources.hpp"

namespace dsec::net {

namespace {

error bad(const std::string& entry, const std::string& why) {
  return invalid_argument("network.deny entry \"" + entry.substr(0, 200) + "\": " + why);
}

} // namespace

expected<std::vector<allow_entry>> parse_deny_list(const std::vector<std::string>& deny) {
  if (deny.size() > max_allow_entries)
    return invalid_argument("network.deny: at most " + std::to_string(max_allow_entries)
                            + " entries, got " + std::to_string(deny.size()));
  std::vector<allow_entry> out;
  out.reserve(deny.size());
  for (auto& s : deny) {
    if (is_source_name(s))
      return bad(s, "an egress source name cannot be denied (deny takes addresses and CIDRs; "
                    "leave the source out of network.allow instead)");
    auto e = parse_allow_entry(s);
    if (!e) {
      // The allow-list parser names its own field; the reason is the same.
      auto msg = e.err().message;
      auto colon = msg.find("\": ");
      return bad(s, colon == std::string::npos ? msg : msg.substr(colon + 3));
    }
    if (!e->domain.empty())
      return bad(s, "a domain cannot be denied (its addresses change between lookups); deny "
                    "addresses or CIDRs");
    out.push_back(std::move(*e));
  }
  return out;
}

bool is_catch_all(const allow_entry& e) {
  if (!e.domain.empty())
    return false;
  if (e.prefix == 0)
    return true;
  // ::ffff:0:0/96, the v4-mapped form of 0.0.0.0/0
  return e.prefix == 96
         && std::all_of(e.addr.begin(), e.addr.begin() + 10, [](uint8_t b) { return b == 0; })
         && e.addr[10] == 0xff && e.addr[11] == 0xff;
}

} // namespace dsec::net
