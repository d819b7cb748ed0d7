// What the native client does when its process forks (internal to
// bindings/client; the public part is fork_generation() in native_client.hpp).
//
// A forked child has one thread, the one that called fork(). The parent's CAF
// runtime (scheduler workers, the middleman's epoll loop, the timer) exists in
// the child as memory only: no thread runs it, and any of its mutexes may have
// been held by one of those threads at the moment of fork. Anything that talks
// to it in the child waits forever; anything that destroys it (~actor_system
// joins its threads, dropping the last reference to an actor runs CAF cleanup
// code under its locks) hangs or crashes.
//
// So, in the child:
//   - the inherited runtime is abandoned: never used, never destroyed;
//   - the fork generation goes up by one, which tells every object holding a
//     handle into the old runtime that the handle is stale (they check it
//     lazily, on their next use, and abandon the handle instead of dropping it);
//   - the next call makes a fresh runtime, and a connection inherited from the
//     parent reconnects to the same address through it, as after a node restart.
//
// The sockets of the parent's connections stay open in the child, unused: the
// kernel closes them when the child exits, and since the parent still holds
// them, nothing is sent to the node (no FIN), and the parent's connection
// carries on. CAF removes a socket from its epoll set before closing it, so
// the child's copies do not leave stale events in the parent's loop either.
#pragma once

#include <utility>

namespace dsec::client::fork {

/// Hooks around every fork() of the process, installed once (pthread_atfork).
struct hooks {
  /// In the forking thread, before fork: takes the runtime lock, so that no
  /// connection is half-updated in the child's copy of memory.
  void (*lock)();
  /// After fork, in the parent and the child: releases it.
  void (*unlock)();
  /// In the child only, before unlock: abandons the inherited runtime. Must
  /// not allocate or take locks (the child of a threaded process).
  void (*reset_child)();
};

/// Installs `h` (the first successful call only; later calls are no-ops). Call
/// under the runtime lock, before the first runtime exists. False if
/// pthread_atfork failed (out of memory): a runtime made without the hooks
/// would hang a forked child, so the caller makes none.
[[nodiscard]] bool install(hooks h);

/// Moves `x` to the heap and never frees it: handles into a runtime inherited
/// across fork must not be released in the child (see the file comment). A few
/// bytes per inherited connection, once per fork.
template <class T>
void abandon(T&& x) {
  if (x)
    (void)new std::decay_t<T>(std::move(x));
}

} // namespace dsec::client::fork
