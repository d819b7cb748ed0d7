// Registers every type that crosses actor or process boundaries with CAF,
// under its wire name. Call it on every actor_system_config, in every process
// (node, Python bindings, tests) before the actor_system is built: a type
// missing here travels as an EMPTY message in CAF 0.17.
#pragma once

#include <caf/fwd.hpp>

namespace dsec {

/// Adds dsec's message types and error category to `cfg`.
void add_wire_types(caf::actor_system_config& cfg);

/// Everything both ends of the native protocol (node, Python bindings) set:
/// the sharing scheduler (work stealing spin-polls and starves 2-core
/// machines), a quiet logger, the middleman with heartbeats, and the wire types.
/// Heartbeats every second and a 10 s connection timeout turn a silent peer
/// (partition, frozen host) into a closed connection, hence `down_msg` and an
/// `unavailable` error, instead of a request that waits forever; 10 s rides out
/// a peer stalled for a few seconds.
void configure_native_protocol(caf::actor_system_config& cfg);

} // namespace dsec
