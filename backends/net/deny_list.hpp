// network.deny in the kernel: how one sandbox's allow and deny entries become
// its eBPF rule list (sec_maps.h, first match deciding) so that E2B's
// precedence holds (core/deny_list.hpp): every allow entry but a catch-all
// wins over a deny, and a deny wins over a catch-all. So "the internet open
// except 10.0.0.0/8" is the list [narrow allows..., deny 10.0.0.0/8,
// allow 0.0.0.0/0, allow ::/0]. A refused connect or send of a deny rule is
// counted like any other network denial ("net ADDR:PORT" in recent).
#pragma once

#include <vector>

#include "backends/net/net_policy.hpp"
#include "core/error.hpp"

namespace dsec::net {

/// The rules of one sandbox in kernel order: `narrow` allows (addresses,
/// prefixes, the addresses domains resolved to), then `deny`, then the
/// catch-all allows. Past `max` rules the narrow allows are cut from the
/// end, which fails closed: what they opened is then open only if a
/// catch-all opens it and no deny closes it. invalid_argument if the denies
/// and catch-alls alone do not fit.
expected<std::vector<rule>> ordered_rules(std::vector<rule> narrow,
                                          const std::vector<rule>& deny,
                                          const std::vector<rule>& catch_all, size_t max);

/// A deny entry as a kernel rule.
rule deny_rule(const allow_entry& e);

} // namespace dsec::net
