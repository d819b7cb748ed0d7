// The container backend's hooks into backends/net: registering a sandbox's
// network policy and denial counters at create() and recover(), and the
// sandbox's set_network()/denials() (container_net.cpp). Internal to the
// container backend.
#pragma once

#include <string>

#include "backends/container/container_sandbox.hpp"
#include "backends/net/sandbox_net.hpp"
#include "sys/cleanup.hpp"

namespace dsec::backends {

/// Refuses a policy this node cannot enforce (bad entries, no eBPF) before
/// create() acquires anything.
status check_network(const net::node_net& net, const std::string& id,
                     const network_policy& policy);

/// create()/recover() step, once init runs and the root is open: the policy
/// and counter entries, and for an allow-list the veth and the sandbox's
/// /etc/resolv.conf. Registers its undo on `undo` (null: none, recover).
status join_network(net::node_net& net, const std::string& id, const network_policy& policy,
                    sandbox_parts& parts, sys::cleanup_stack* undo);

} // namespace dsec::backends
