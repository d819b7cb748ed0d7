// The sandbox actor's process handlers: background execs (started, answered
// with their pid at once, output and exit kept by the actor), the sandbox's
// process table and signals, all through the backend's init. Split from
// sandbox.cpp by mechanism; sandbox_behavior() calls these from its entries.
#pragma once

#include <cstdint>

#include "actors/sandbox.hpp"

namespace dsec {

/// Finished background commands a sandbox keeps for get/wait (oldest
/// dropped first). Each holds at most 16 MiB per stream of output.
constexpr size_t max_finished_background = 64;
/// Output bytes (both streams) the finished ones of a sandbox keep in all;
/// past it the oldest finished records go first, so one sandbox cannot hold
/// 64 x 32 MiB of a node's memory. The newest finished one always stays.
constexpr size_t max_finished_output = 64u << 20;

/// (bgexec_atom, exec_request): starts `req` and answers a running
/// background_process with its pid once init reported it.
void start_background(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
                      bool keep_stdin = false, uint16_t pty_cols = 0, uint16_t pty_rows = 0);

/// (procs_atom): every process of the sandbox, background ones marked.
void list_processes(sandbox_actor_ptr self, caf::response_promise rp);

/// (proc_atom, pid, wait_ms): the background command `pid` (output so far,
/// the result once done), waiting up to `wait_ms` for it to end (0 = answer
/// now). A pid that is not a background command but runs in the sandbox is
/// answered as running without output; otherwise not_found.
void get_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                 int64_t wait_ms);

/// (signal_atom, pid, signo, group): signals one process or its group.
void signal_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                    int32_t signo, bool group);

/// (stdin_atom, pid, data, close): writes to a background command started
/// with keep_stdin, then closes its stdin if `close`.
void send_stdin(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid, std::string data,
                bool close);

/// (follow_atom, pid, sink, token): sends `sink` what background command
/// `pid` printed so far, in order, then every chunk as it comes; answers the
/// exit status (no output: the sink had it all) when the command ends, or
/// as it stands if the sink goes down first. Never resumes a paused sandbox.
void follow_process(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid,
                    caf::actor sink, uint64_t token);

/// A sink went down (the actor's down handler): its follows are answered and
/// dropped, its watches stopped (sandbox_watch.hpp).
void on_sink_down(sandbox_actor_ptr self, const caf::actor_addr& sink);

/// Answers every wait() and follow in progress with `why`, and ends every
/// watch (the sandbox is being destroyed: its background commands die with it).
void fail_waiters(sandbox_actor_ptr self, const error& why);

/// INTERNAL (pwait_atom, pid, waiter): a wait's time is up; answers it with
/// the command still running.
void wait_expired(sandbox_actor_ptr self, int32_t pid, uint64_t waiter);

} // namespace dsec
