// Connecting the node to a fork server in a pool sandbox, safely: the
// server's socket path is resolved inside the sandbox's own root, so nothing
// planted there can point the node at a host socket.
#pragma once

#include <atomic>
#include <chrono>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends::fncall {

/// Connects to the unix socket at `path` (absolute, inside the sandbox whose
/// init is `init_pid`) once the server listens, and waits for its "ready"
/// frame. Blocking, polling every 2 ms until `until`; gives up early when
/// `server_gone` is set (the server exited).
expected<sys::unique_fd> connect_fork_server(int init_pid, const char* path,
                                             std::chrono::steady_clock::time_point until,
                                             const std::atomic<bool>& server_gone);

} // namespace dsec::backends::fncall
