// What ends or pauses a sandbox besides a call: its idle policy and what the
// end of its TTL does (spec on_timeout, idle_timeout_s, on_idle; DSec's
// ttl_running_stop, E2B's lifecycle.onTimeout).
//
// Idle means no call and no CPU: no operation in flight, none arrived for
// idle_timeout_s, and the node's reclaim sampling saw its CPU time grow by
// less than its idle share (policy/reclaim_policy.hpp) for that long. After
// each reclaim pass the lifecycle actor sends every running sandbox that has
// an idle policy (idle_atom, idle_since_ms) with the sample's view of its
// CPU (0 = busy); the sandbox actor decides here. Every operation that
// passes the gate (ready_for) counts as a call.
//
// on_timeout "pause": the TTL's end pauses instead of destroying, with the
// whole ttl_s kept for the next run, so a resumed sandbox gets its timeout
// afresh (as E2B's auto-pause does).
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"

namespace dsec {

struct sandbox_actor_state;
using sandbox_actor_ptr = sandbox_actor::stateful_pointer<sandbox_actor_state>;

/// The idle part of a sandbox actor's state.
struct sandbox_idle {
  /// Unix ms of the last call (or of the start).
  int64_t last_call_ms = 0;
};

/// What a policy asks of the sandbox now.
struct policy_action {
  enum kind_t { none, pause, destroy } kind = none;
  /// The reason a destroy gives ("idle timeout: idle_timeout_s N").
  std::string reason;
  /// A pause keeps the memory ("pause"), or only the files ("pause_files").
  bool keep_memory = true;
};

/// A call reached the sandbox: its idle stretch starts again.
void idle_on_call(sandbox_actor_ptr self);

/// After a reclaim pass: `cpu_idle_since_ms` is when its CPU went quiet
/// (0 = busy). Pause or destroy if idle_timeout_s passed with no call and
/// no CPU (logged); none otherwise.
policy_action idle_due(sandbox_actor_ptr self, int64_t cpu_idle_since_ms);

/// The TTL ran out while the sandbox runs: destroy (on_timeout "destroy"),
/// or pause with the whole ttl_s kept for the next run (logged).
policy_action timeout_due(sandbox_actor_ptr self);

} // namespace dsec
