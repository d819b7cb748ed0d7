// The sandbox actor's directory watches (the watch row of interfaces.hpp):
// the backend watches (container: inotify on the io_loop thread, see
// backends/container/dir_watch.cpp) and sends each change straight to the
// subscriber's sink as a chunk (actors/chunk_relay.hpp, watch_*_stream); the
// actor only holds the handle, so a watch ends with its sink, its sandbox or
// its directory. Split from sandbox.cpp by mechanism.
#pragma once

#include <cstdint>
#include <string>

#include "actors/sandbox.hpp"

namespace dsec {

/// (watch_atom, path, recursive, sink, token): sets the watch up on the
/// worker pool, sends `sink` a subscribed_stream chunk, then every change;
/// answered when the watch ends: true once the sink went down, an error
/// naming the watch if the directory or the sandbox went away. A backend
/// without watches (the VMs) is refused with an error naming it.
void watch_dir(sandbox_actor_ptr self, caf::response_promise rp, std::string path, bool recursive,
               caf::actor sink, uint64_t token);

/// Stops the watches whose sink is `sink` (it went down) and answers them.
void stop_watches_of(sandbox_actor_ptr self, const caf::actor_addr& sink);

/// Stops every watch and answers it with `why` (the sandbox is going away).
void end_watches(sandbox_actor_ptr self, const error& why);

} // namespace dsec
