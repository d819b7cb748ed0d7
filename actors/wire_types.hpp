// Registers every type that crosses actor or process boundaries with CAF,
// under its wire name. Call it on every actor_system_config, in every process
// (node, Python bindings, tests) before the actor_system is built: a type
// missing here travels as an EMPTY message in CAF 0.17.
#pragma once

#include <caf/fwd.hpp>

namespace dsec {

/// Adds dsec's message types and error category to `cfg`.
void add_wire_types(caf::actor_system_config& cfg);

} // namespace dsec
