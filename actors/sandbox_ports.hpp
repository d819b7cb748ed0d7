// The sandbox actor's port operation (ops::port_op, issue 26 part 3): where a
// port inside the sandbox is served. The owner answers with its node id and
// REST address (a peer's gateway relays the request there), the sandbox's
// traffic token, and its backend handle for a gateway on this node. A paused
// sandbox is resumed first: a request to the port follows at once.
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

#include "actors/node_context.hpp"
#include "actors/sandbox.hpp"

namespace dsec {

/// Answers `rp` with the sandbox's port_route for `port` (checked 1..65535
/// by ops::port_op::check).
void route_port(sandbox_actor_ptr self, caf::response_promise rp, int32_t port);

/// The REST address peers reach this node at: --rest, with a wildcard host
/// (0.0.0.0, ::) replaced by --advertise's host.
std::string reachable_rest(const node_config& cfg);

} // namespace dsec
