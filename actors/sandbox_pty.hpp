// The sandbox actor's terminals (issue 26 part 1): a terminal is a
// background command run on a pty inside the sandbox (backends/init/pty.cpp),
// so its pid, wait (proc_op), kill (signal_op) and pushed output (follow_op)
// are a background command's (sandbox_procs.hpp). What differs is here: it
// opens with a size, takes input and resizes while it runs, its output goes
// out as stream 4 (pty_stream) and the sandbox keeps only its last
// pty_scrollback bytes, what a client that reattaches gets first.
#pragma once

#include <cstdint>
#include <string>

#include "actors/sandbox.hpp"

namespace dsec {

/// The exec_chunk stream of a terminal's output (1 and 2 are a command's
/// stdout and stderr, 0 the subscription marker and 3 a watch change of
/// actors/chunk_relay.hpp).
constexpr int32_t pty_stream = 4;
/// Output bytes a terminal keeps for a client that reattaches: a few
/// screens of an 80x24 terminal, per terminal. Too small loses context on
/// reattach; larger costs node memory per open terminal.
constexpr size_t pty_scrollback = 64u << 10;

/// (ptyopen_atom, req, cols, rows): starts `req` (empty argv: the user's
/// login shell) on a new terminal; answers the running process.
void open_pty(sandbox_actor_ptr self, caf::response_promise rp, exec_request req, int32_t cols,
              int32_t rows);

/// (ptywrite_atom, pid, data): types `data` at terminal `pid`: not_found if
/// it is not a terminal of this sandbox, conflict once it exited.
void write_pty(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid, std::string data);

/// (ptysize_atom, pid, cols, rows): resizes terminal `pid` (its foreground
/// job gets SIGWINCH); errors as write_pty.
void resize_pty(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid, int32_t cols,
                int32_t rows);

/// A chunk of terminal `e`'s output: kept (bounded) and pushed to its
/// followers as pty_stream (sandbox_procs.cpp's on_output).
void pty_output(background_entry& e, exec_chunk& c);

} // namespace dsec
