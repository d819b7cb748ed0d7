// The allow-list grammar as the network backend names it. The parser itself
// lives in core/allow_list.hpp, where request validation uses it too; this
// header keeps `net::parse_allow_entry`, `net::parse_allow_list`,
// `net::allow_entry`, `net::format_addr` and `net::v4_mapped` reachable from
// backends/net under their old include path.
#pragma once

#include "core/allow_list.hpp"
