// The grammar of a sandbox's network allow-list (`network.allow`), parsed
// into addresses, prefixes and domains: the one parser of that input. Request
// validation (core/validate.cpp) calls it at the edge and the container
// backend (backends/net) calls it again before it programs the kernel, so
// every list the gateway accepts is one the backend can apply. Pure: the
// standard library and libc's inet_pton/inet_ntop only.
//
// An entry is `HOST:PORT` where HOST is
//   - an IPv4 address             10.1.2.3:443
//   - an IPv4 prefix              10.0.0.0/8:443
//   - an IPv6 address or prefix   [2001:db8::1]:443, [2001:db8::/32]:443
//   - a domain name               pypi.org:443 (resolved by the node when the
//                                 policy is set, re-resolved every 30 s)
// and PORT is 1..65535 or `*` (every port). A prefix must have no host bits
// set, so `10.0.0.1/8` is refused rather than silently widened. An entry
// allows TCP and UDP alike.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec::net {

/// 16 bytes in network order; IPv4 as ::ffff:a.b.c.d.
using addr16 = std::array<uint8_t, 16>;

/// One parsed allow-list entry.
struct allow_entry {
  /// Set for address and prefix entries.
  addr16 addr{};
  /// Prefix length over the 128-bit (v4-mapped) address; 128 = one host.
  int prefix = 128;
  /// Set for domain entries (lower case); addr/prefix unused then.
  std::string domain;
  /// Host byte order; 0 = any port (`*`).
  uint16_t port = 0;
};

/// Entries per sandbox: each becomes one or more kernel rules (a domain one
/// per address), and the kernel holds at most 128 per sandbox.
constexpr size_t max_allow_entries = 128;

/// Parses one entry; the error (invalid_argument) starts with
/// `network.allow entry "<entry>": ` and says what is wrong with it.
expected<allow_entry> parse_allow_entry(std::string_view s);

/// Parses a whole list (at most max_allow_entries, else invalid_argument
/// "network.allow: at most 128 entries, got N"); the first bad entry fails it.
/// An entry that is an egress source name (`pypi`) expands into that
/// source's entries; an unknown name fails naming the known ones.
expected<std::vector<allow_entry>> parse_allow_list(const std::vector<std::string>& allow);

/// "1.2.3.4" for v4-mapped addresses, "2001:db8::1" otherwise.
std::string format_addr(const addr16& a);

/// v4-mapped form of an IPv4 address given in network order.
addr16 v4_mapped(uint32_t be_addr);

} // namespace dsec::net
