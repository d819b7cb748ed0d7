// The sandbox actor's side of the trajectory log (journal/trajectory_store.hpp):
// every exec (plain or streamed) and every file write that reaches the sandbox
// actor, whichever door it came through (REST, the Python SDK, the CLI, a
// peer), is appended to the sandbox's log before it is answered, in the order
// the actor finished them. An exec that carries a step the log already holds
// is answered from the log (fast-forward) or refused with 409 if its request
// changed. Disk work runs on the worker pool, one job at a time per sandbox
// (trajectory::strand), so records keep their order and actor threads never
// block.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <caf/response_promise.hpp>

#include "actors/sandbox.hpp"
#include "journal/trajectory_store.hpp"

namespace dsec {

/// One sandbox's log and the strand that writes it. Shared by the actor and
/// its jobs; the log object is touched only from strand jobs.
struct trajectory_handle {
  trajectory::store_options opts;
  std::shared_ptr<trajectory::strand> strand;
  std::shared_ptr<trajectory::sandbox_log> log;
};

/// The log of sandbox `id` (null when the node keeps none, --no-trajectory).
std::shared_ptr<trajectory_handle> make_trajectory(const node_context& ctx,
                                                   const std::string& id,
                                                   const sandbox_spec& spec);

/// Opens a new sandbox's log (its spec record, seq 0), then runs `then` in
/// the actor. A log that cannot be opened is reported and the sandbox runs on
/// (each later record tries again).
void trajectory_open(sandbox_actor_ptr self, std::function<void()> then);

/// The exec and stream handlers: a step the log holds is answered from it
/// (`replayed`), a changed step or one running now gets 409, anything else
/// runs (run_exec) and is logged when it ends.
void trajectory_exec(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
                     std::function<void(exec_chunk)> sink, uint64_t token);

/// What an exec's record holds before it ran (argv, cwd, env, stdin, step,
/// start time); null when the sandbox keeps no log.
std::shared_ptr<trajectory::record> trajectory_begin(sandbox_actor_ptr self,
                                                     const exec_request& req);

/// An exec started with trajectory_begin ended: logs `res` (a result; an
/// error is not logged), then answers `rp` and ends the operation (end_op).
void trajectory_exec_done(sandbox_actor_ptr self, caf::response_promise rp,
                          std::shared_ptr<trajectory::record> rec, expected<exec_result> res);

/// A background command started (pid) or ended (result): logs its "exec"
/// record (background, no result) or its "exit" record, in the order the
/// actor saw them; nothing waits for the write.
void trajectory_background_started(sandbox_actor_ptr self, std::shared_ptr<trajectory::record> rec,
                                   int32_t pid);
void trajectory_background_ended(sandbox_actor_ptr self, int32_t pid, const exec_result& res);

/// The wfile handler: writes the file, logs it (path, size, digest, content
/// by digest), then answers.
void trajectory_write_file(sandbox_actor_ptr self, caf::response_promise rp, std::string path,
                           std::string data);

/// Appends a record that is not an exec or file (rebuilt, destroyed), then
/// answers `rp` with true (if it is valid).
void trajectory_note(sandbox_actor_ptr self, caf::response_promise rp, trajectory::record rec);

/// Logs that the sandbox is being destroyed (and why); the actor quits only
/// once the record is written.
void trajectory_destroyed(sandbox_actor_ptr self, const std::string& reason);

/// Logs a shell session's open or close record (issue 26 part 2,
/// actors/sandbox_session.hpp); nothing waits for the write.
void trajectory_session_note(sandbox_actor_ptr self, trajectory::record rec);

} // namespace dsec
