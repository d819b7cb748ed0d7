// The lifecycle actor: owns this node's sandboxes. It admits or refuses
// creates (capacity, capabilities, idempotency keys), spawns one sandbox actor
// per sandbox, keeps the table that get and list answer from, and routes exec,
// files and destroy to the sandbox's actor.
//
// The sandbox state machine (DESIGN.md §3), as this node runs it
// (actors/sandbox.cpp moves a sandbox, the table here follows):
//
//            create
//              │
//          creating ──(backend fails)──► gone (the create answers the error)
//              │ (started)
//              ▼
//           running ──(destroy / ttl)──► stopped ──(teardown done)──► gone
//            │   ▲  └──(init dies, OOM)──► failed ──(destroy / ttl)──► gone
//   (pause)  │   │ (resume, or any call: transparent resume)
//            ▼   │
//           paused ──(destroy / paused_ttl_s)──► gone
//
// `gone` is leaving the table, once the teardown is done. Only a running
// sandbox shows `stopped` while it is torn down; a failed or paused one keeps
// its state until it is gone. While paused, the TTL (running time) stands
// still and paused_ttl_s runs instead. A failed pause leaves the sandbox
// running, a failed resume leaves it paused (the calls that waited for the
// resume get its error). A destroy that arrives while creating waits for the
// create: the sandbox is destroyed as soon as it runs. Node shutdown destroys
// every sandbox the same way.
//
// A sandbox that outlived a node restart (node_context::recovered) enters the
// table with the id, labels and times it had, `running`, or `paused` if it
// was (actors/sandbox_ttl.hpp), and follows the same machine from there (its
// TTL counts running time since its first creation).
//
// A sandbox actor that exits abnormally (a crash, a kill) is seen through its
// monitor: its row turns `failed` with the exit reason and frees its
// request_id, and destroy removes it. A normal exit is the end of a destroy
// and changes nothing.
//
// `lost` arrives with the cluster (placement answers it for a dead owner).
#pragma once

#include <map>
#include <string>
#include <unordered_map>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"
#include "policy/reclaim_policy.hpp"
#include "core/types.hpp"

namespace dsec {

/// One row of the sandbox table.
struct sandbox_entry {
  sandbox_actor actor;
  sandbox_info info;
  sandbox_spec spec;
  /// What admission expected it to use, MiB (reclaim::expected_need_mb).
  int64_t need_mb = 0;
  /// Its actor exited abnormally (lifecycle monitors every sandbox actor):
  /// the row lists as failed with the exit reason until a destroy removes it,
  /// and calls on it fail at once.
  bool dead = false;
};

/// The reclaim actor's last sample, as admission and info read it.
struct measured_memory {
  reclaim::memory_report last;
  std::unordered_map<std::string, reclaim::sandbox_memory> by_id;
  /// Needs of creates admitted since `last` (and those still creating), MiB.
  int64_t reserved_mb = 0;
};

/// State of the lifecycle actor.
struct lifecycle_state {
  static inline const char* name = "lifecycle";
  node_context_ptr ctx;
  std::unordered_map<std::string, sandbox_entry> sandboxes;
  /// Sum of memory_mb over `sandboxes`, kept as they come and go: admission
  /// reads it on every create, which must not walk the table (3,200 entries).
  int64_t committed_mb = 0;
  /// request_id -> sandbox id (idempotent creates).
  std::unordered_map<std::string, std::string> by_request;
  int64_t creates_total = 0;
  int64_t create_failures_total = 0;
  int64_t destroys_total = 0;
  bool shutting_down = false;
  std::vector<caf::response_promise> shutdown_waiters;
  /// The reclaim actor (null in tests without one: creates are then admitted
  /// by count alone until a report arrives).
  reclaim_actor reclaim;
  measured_memory memory;
  /// request_id -> creates with that key that came while the first waited
  /// for a reclaim (admission); they run again once it is decided, so they
  /// find its sandbox instead of making a second one.
  std::unordered_map<std::string, std::vector<std::pair<sandbox_spec, caf::response_promise>>>
    admitting;
};

using lifecycle_actor_ptr = lifecycle_actor::stateful_pointer<lifecycle_state>;

/// The lifecycle actor's behavior (protocol in actors/interfaces.hpp). It
/// adopts ctx->recovered before it answers anything.
lifecycle_actor::behavior_type lifecycle_behavior(lifecycle_actor_ptr self, node_context_ptr ctx);

} // namespace dsec
