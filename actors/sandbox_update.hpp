// The sandbox actor's update handler (PATCH /v1/sandboxes/{id}): the CPU
// class and the network policy of a running sandbox, applied together.
// sandbox_handlers() calls it; what it shares with sandbox.cpp is in sandbox_ops.hpp.
#pragma once

#include <string>
#include <vector>

#include "actors/sandbox.hpp"

namespace dsec {

/// (update_atom, cpu_class, set_network, policy): the class if not empty,
/// then the policy if set_network (a paused sandbox is resumed first, as for
/// every call); answers the sandbox info, or the first error (saying what
/// was applied before it).
void update_sandbox(sandbox_actor_ptr self, caf::response_promise rp, std::string cls,
                    bool set_net, network_policy policy);

} // namespace dsec
