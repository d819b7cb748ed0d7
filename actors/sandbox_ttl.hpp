// The TTL of one sandbox actor over pauses (core/ttl.hpp has the math): the
// TTL counts running time, so a pause stops it (expires_at cleared, the time
// left kept) and a resume starts it again; a paused sandbox is destroyed
// once it has been paused paused_ttl_s (logged), so a job that never comes
// back leaks nothing.
//
// Each arm bumps a generation carried by its (ttl_atom, gen) message: a
// timer armed before a pause or resume fires with an old generation and is
// dropped. After every pause and resume the state goes into the sandbox's
// one record (actors/sandbox_record.hpp) on the worker pool (writes in
// order, none after teardown began), which a restarted node reads so a
// paused sandbox is adopted paused, with its time left.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"

namespace dsec {

struct node_context;
struct recovered_sandbox;
struct sandbox_actor_state;
using sandbox_actor_ptr = sandbox_actor::stateful_pointer<sandbox_actor_state>;

/// Orders the TTL writes into one sandbox's record and ends them at teardown.
/// Shared with the worker pool.
struct ttl_file_guard {
  std::mutex m;
  bool closed = false;
  uint64_t written = 0;
};

/// The TTL part of a sandbox actor's state.
struct sandbox_ttl {
  /// Generation of the armed timer; older (ttl_atom, gen) messages are stale.
  uint64_t gen = 0;
  /// Sequence of the last TTL write asked for.
  uint64_t seq = 0;
  std::shared_ptr<ttl_file_guard> file = std::make_shared<ttl_file_guard>();
};

/// Arms the timer for the state the sandbox is in: running (or failed) at
/// info.expires_at_ms, paused at info.paused_expires_at_ms; nothing without
/// one. Sends (ttl_atom, gen) to self then (at once if past).
void ttl_arm(sandbox_actor_ptr self);

/// The sandbox just became paused: stops its TTL, starts paused_ttl_s, keeps
/// the state in its record. Call before reporting the new state.
void ttl_on_paused(sandbox_actor_ptr self);

/// The sandbox just became running again: its TTL goes on from the time left.
void ttl_on_resumed(sandbox_actor_ptr self);

/// A new TTL of ttl_s seconds of running time from now (0 = none; E2B's
/// setTimeout): the timer before it goes stale, the record keeps the new one.
void ttl_set(sandbox_actor_ptr self, int64_t ttl_s);

/// A (ttl_atom, gen) arrived: why the sandbox must go now ("ttl expired",
/// "paused ttl expired: paused_ttl_s N"; core/error_kind.hpp reads both as
/// the spec's doing), or empty if the timer is stale. Logs a paused
/// sandbox's expiry.
std::string ttl_due(sandbox_actor_ptr self, uint64_t gen);

/// Adopted after a node restart: paused again if it was, with its time left.
/// Call once the actor's info is set, instead of ttl_arm.
void ttl_adopt(sandbox_actor_ptr self, const recovered_sandbox& rec);

/// Teardown (any thread): no TTL write into the record starts after this.
void ttl_close(ttl_file_guard& g);

} // namespace dsec
