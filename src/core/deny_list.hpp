// The grammar of a sandbox's network deny-list (`network.deny`) and how it
// meets the allow-list: the one place both rules live, used by request
// validation (core/validate.cpp) and by the backend that programs the kernel
// (backends/net/sandbox_net.cpp). Pure.
//
// A deny entry is an address or prefix entry of the allow-list grammar
// (core/allow_list.hpp): `8.8.8.8:*`, `10.0.0.0/8:443`, `[2001:db8::/32]:*`.
// Domains and egress source names are refused: a name resolves to addresses
// that change, so closing it would fail open between lookups (E2B's denyOut
// takes no domains either).
//
// Precedence, E2B's: an allow entry wins over a deny entry, except a
// catch-all allow (0.0.0.0/0 or ::/0, any port), which is what "the internet
// open" means. So {"allow": ["0.0.0.0/0:*"], "deny": ["8.8.8.8:*"]} reaches
// everything but 8.8.8.8, and adding "8.8.8.8:*" to allow opens it again.
#pragma once

#include <string>
#include <vector>

#include "core/allow_list.hpp"
#include "core/error.hpp"

namespace dsec::net {

/// Parses a deny-list; invalid_argument naming the entry
/// (`network.deny entry "x": ...`) for a domain, a source name, a bad
/// address or port, or more than max_allow_entries entries.
expected<std::vector<allow_entry>> parse_deny_list(const std::vector<std::string>& deny);

/// True for an address entry that reaches every IPv4 address
/// (0.0.0.0/0, stored as ::ffff:0:0/96) or every address (::/0).
bool is_catch_all(const allow_entry& e);

} // namespace dsec::net
