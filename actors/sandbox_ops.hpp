// What the sandbox actor's handler files (sandbox_pause, sandbox_procs,
// sandbox_trajectory, sandbox_update) share of its core in sandbox.cpp: the
// gate every operation passes (a paused sandbox is resumed first), the count
// of operations in flight (the actor quits only when it is zero after a
// destroy), and the lifecycle's copy of the info.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/caf_error.hpp"
#include "actors/sandbox.hpp"

namespace dsec {

/// Whether an operation answering `rp` can run now: true if the sandbox runs;
/// otherwise `rp` got the error, or `retry` runs later with `rp` (a paused
/// sandbox is resumed first: the transparent resume).
bool ready_for(sandbox_actor_ptr self, caf::response_promise& rp,
               std::function<void(caf::response_promise)> retry);

/// After a pause, resume or snapshot ended (`last` its outcome): the
/// operations that waited run, or a resume starts, or they get its error.
void run_deferred(sandbox_actor_ptr self, const status& last);

/// "sandbox <id> is <state> (<reason>)", as `unavailable`.
error not_running(const sandbox_actor_state& st);

/// Tells the lifecycle actor the sandbox's info changed.
void report_state(sandbox_actor_ptr self);

/// Fills an exec's empty cwd and user from the sandbox's layers' exec
/// defaults (an exec's own values win).
void apply_exec_defaults(const sandbox_actor_state& st, exec_request& req);

/// Ends an operation started with ++inflight (the actor may quit now).
void end_op(sandbox_actor_ptr self);

/// Quits once the sandbox is destroyed and no operation is in flight,
/// answering whoever waits.
void maybe_quit(sandbox_actor_ptr self);

/// Tears the sandbox down (once; after a boot again under way); every
/// caller's promise is answered when done.
void begin_destroy(sandbox_actor_ptr self, const std::string& why);

/// (start_atom): provisions the sandbox (image, layers, backend, record) on
/// the worker pool and answers `rp` with its info once it runs
/// (sandbox_create.cpp).
void start_sandbox(sandbox_actor_ptr self, caf::response_promise rp);

/// What a backend needs to make sandbox `id` of `spec` (with the layers'
/// env under the spec's) over the layer mounts `held` holds.
backends::create_params backend_params(const node_context& ctx, const std::string& id,
                                       const sandbox_spec& spec, const held_layers& held);

/// A boot again (st.booting) ended: a destroy that came meanwhile begins.
void end_boot(sandbox_actor_ptr self);

/// Turns the backend's exit callback into (died_atom, reason).
void watch_exit(sandbox_actor_ptr self);

/// Ends an operation started with ++inflight and answers `rp` with `res`.
template <class T>
void finish_op(sandbox_actor_ptr self, caf::response_promise& rp, expected<T>& res) {
  if (res)
    rp.deliver(std::move(*res));
  else
    rp.deliver(to_caf(res.err()));
  end_op(self);
}

/// Runs an exec on the backend (the gate passed); `sink` gets its output.
void run_exec(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
              std::function<void(exec_chunk)> sink, uint64_t token);

/// Blocking: rewrites the record a restarted node adopts the sandbox from,
/// with `cpu_class` the class it runs in now.
status write_record(const node_context& ctx, const std::string& id, const sandbox_spec& spec,
                    int64_t created_at_ms, const std::vector<std::string>& digests,
                    const std::string& cpu_class);

} // namespace dsec
