// The sandbox actor: one per sandbox, spawned by the lifecycle actor. It owns
// the backend's sandbox object and the layer mounts it holds, serialises state
// changes (creating -> running -> stopped | failed), arms the TTL and turns
// exec and file calls into backend calls that never block its thread. An exec,
// file call, snapshot or network change on a paused sandbox resumes it first
// (transparent resume), so a trainer back from preemption need not know what
// it paused. Once the
// sandbox runs, it keeps a record of it on disk (record.json in the sandbox
// dir) so that a restarted node can adopt it (adopted_sandbox_behavior).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"
#include "actors/sandbox_ttl.hpp"
#include "actors/sandbox_idle.hpp"
#include "core/types.hpp"
#include "core/output_budget.hpp"

namespace dsec {

struct trajectory_handle; // actors/sandbox_trajectory.hpp
struct session_table;     // actors/sandbox_session.hpp (issue 26 part 2)

} // namespace dsec

namespace dsec::backends {
class dir_watch; // backends/backend.hpp
} // namespace dsec::backends

namespace dsec {

/// An operation that came while the sandbox was paused, being paused or
/// being resumed: it runs (answering `rp`) once the sandbox is running again
/// (transparent resume), or `rp` gets the error that stopped the resume.
struct deferred_op {
  caf::response_promise rp;
  std::function<void(caf::response_promise)> run;
};

// -- push streams (issue 24 part 2) ---------------------------------------------

/// A subscriber of a background command's output (the follow row): its sink
/// gets every chunk, its promise the exit status (sandbox_procs.cpp).
struct follower {
  caf::actor sink;
  uint64_t token = 0;
  caf::response_promise rp;
};

/// A directory watch of the sandbox (the watch row, sandbox_watch.cpp); the
/// backend's handle stops the watch when released.
struct watch_entry {
  caf::actor sink;
  caf::response_promise rp;
  std::shared_ptr<backends::dir_watch> handle;
};

// -- end push streams ---------------------------------------------------------

/// A background command the sandbox actor keeps (sandbox_procs.cpp).
struct background_entry {
  background_process proc;
  /// The backend's exec id (for send_stdin).
  uint64_t exec_id = 0;
  /// wait() callers, by waiter id, answered when it ends (or their time is up).
  std::map<uint64_t, caf::response_promise> waiters;
  /// Push streams: the order its output came in, as (stream, bytes) runs
  /// over proc.result's two strings, so a late follower gets it as printed;
  /// and the followers, answered when it ends.
  std::vector<std::pair<int32_t, size_t>> runs;
  std::vector<follower> followers;
  /// A terminal (actors/sandbox_pty.hpp): its output goes out as stream 4
  /// (pty_stream) and only the last pty_scrollback bytes are kept.
  bool pty = false;
  /// What its kept output took from the node's budget, given back when the
  /// record goes (core/output_budget.hpp; issue 29 part 4).
  output_charge charge{&output_budget::node()};
  /// Its stdout and stderr under that budget (their drop markers).
  kept_stream streams[2];
};

/// State of one sandbox actor.
struct sandbox_actor_state {
  static inline const char* name = "sandbox";
  node_context_ptr ctx;
  lifecycle_actor lifecycle;
  sandbox_spec spec;
  sandbox_info info;
  std::shared_ptr<backends::sandbox> sb;
  /// Layer digests whose mounts this sandbox holds.
  std::vector<std::string> digests;
  /// Its layers' exec defaults (layer_config): the working directory and
  /// user of an exec that names none; empty = "/" and root.
  std::string exec_workdir;
  std::string exec_user;
  /// Execs started and not yet reported back.
  int inflight = 0;
  /// Caller tokens of running execs -> backend exec ids (for cancel).
  std::unordered_map<uint64_t, uint64_t> cancellable;
  /// Set once destroy has begun; later destroys wait for the first.
  bool destroying = false;
  /// A pause, resume or snapshot is running (one at a time).
  bool changing = false;
  /// The change running is a pause (operations that come now wait for it,
  /// then resume the sandbox).
  bool pausing = false;
  /// A powered-off sandbox boots again: a destroy waits for the boot (both
  /// would work on its directory), with its reason here.
  bool booting = false;
  std::optional<std::string> destroy_after_boot;
  /// Operations waiting for the sandbox to run again, in arrival order.
  std::vector<deferred_op> after_resume;
  /// Exec tokens cancelled while their exec waited in after_resume.
  std::unordered_set<uint64_t> cancelled_early;
  bool destroyed = false;
  std::vector<caf::response_promise> destroy_waiters;
  /// Background commands by pid: the running ones and the last few finished
  /// (oldest first in `finished`), see sandbox_procs.hpp.
  std::map<int32_t, background_entry> background;
  std::deque<int32_t> finished;
  uint64_t next_waiter = 0;
  /// Push streams: directory watches by a local id (sandbox_watch.cpp).
  std::map<uint64_t, watch_entry> watches;
  /// Its TTL over pauses (sandbox_ttl.hpp).
  sandbox_ttl ttl;
  /// Its last call, for the idle policy (sandbox_idle.hpp).
  sandbox_idle idle;
  /// The sandbox's trajectory log (null: the node keeps none), and the step
  /// keys of execs running now (sandbox_trajectory.hpp).
  std::shared_ptr<trajectory_handle> log;
  std::unordered_set<std::string> running_steps;
  /// Set once the backend sandbox and the layer mounts were handed to a
  /// teardown (destroy, or its init died).
  bool released = false;
  /// Its shell sessions (sandbox_session.hpp); null until the first opens.
  std::shared_ptr<session_table> sessions;

  /// An actor that ends without having released its sandbox (an abnormal
  /// exit: a bug, an exception, a kill) still releases it: the backend
  /// sandbox and the layer mounts go on the worker pool, as destroy does.
  ~sandbox_actor_state();
};

using sandbox_actor_ptr = sandbox_actor::stateful_pointer<sandbox_actor_state>;

/// What a sandbox looks like before it runs (state creating).
sandbox_info initial_info(const std::string& id, const std::string& node,
                          const sandbox_spec& spec);

/// What a sandbox recovered after a node restart looks like: running, with
/// the id, labels and times it had.
sandbox_info recovered_info(const recovered_sandbox& rec, const std::string& node);

/// Spawned by lifecycle with the id and spec; waits for (start_atom).
sandbox_actor::behavior_type sandbox_behavior(sandbox_actor_ptr self, node_context_ptr ctx,
                                              lifecycle_actor lifecycle, std::string id,
                                              sandbox_spec spec);

/// Spawned by lifecycle for a sandbox that outlived the previous node process
/// ("adopted" mode): running at once, holding `rec`'s backend sandbox and layer
/// mounts, its TTL re-armed for the time left (destroyed at once if none is
/// left). Takes no (start_atom); everything else as sandbox_behavior.
sandbox_actor::behavior_type adopted_sandbox_behavior(sandbox_actor_ptr self,
                                                      node_context_ptr ctx,
                                                      lifecycle_actor lifecycle,
                                                      recovered_sandbox rec);

} // namespace dsec
