// The sandbox actor's update handler (PATCH /v1/sandboxes/{id}): the CPU
// class and the network policy of a running sandbox, applied together.
// sandbox_behavior() calls it; the helpers below it come from sandbox.cpp.
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

// -- from sandbox.cpp ------------------------------------------------------------

/// Blocking: rewrites the record a restarted node adopts the sandbox from,
/// with `cpu_class` the class it runs in now.
status write_record(const node_context& ctx, const std::string& id, const sandbox_spec& spec,
                    int64_t created_at_ms, const std::vector<std::string>& digests,
                    const std::string& cpu_class);

/// Tells the lifecycle actor the sandbox's info changed.
void report_state(sandbox_actor_ptr self);

/// Ends an operation started with ++inflight (the actor may quit now).
void end_op(sandbox_actor_ptr self);

} // namespace dsec
