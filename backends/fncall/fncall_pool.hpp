// The FnCall pool: a per-node set of warm container sandboxes, each running
// the fork server (fork_server/server.py) with the interpreter preloaded, that
// serves POST /v1/fncall. A call goes to an idle worker over a unix stream
// socket the node holds open (connected once through the sandbox's root, then
// unlinked inside it), so a call costs one fork in the sandbox and no exec
// through init.
//
// Plain C++ (no CAF), like every backend: the fncall actor (actors/fncall.cpp)
// owns one and turns its callbacks into replies. Two threads of its own: an
// I/O thread (epoll over the worker sockets, deadlines) and a manager thread
// that does the blocking work (create, destroy) and sizes the pool:
//
//   - starts `min_workers` on the first call (or at once with `prewarm`); grows by one worker at a time while calls
//     wait, up to `max_workers`; retires a worker idle for `idle_shrink`
//     while more than `min_workers` are alive;
//   - replaces a worker whose server died, whose call overran its deadline
//     (the call stopped or killed the server), or that reported itself
//     tainted (the call changed what the server cannot reset);
//   - queues calls while every worker is busy, up to `max_queue`
//     (resource_exhausted beyond).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::backends::fncall {

/// Mounted layers for one worker: directories (bottom first) and the digests
/// to hand back to `release`.
struct mounted_layers {
  std::vector<std::string> dirs;
  std::vector<std::string> digests;
};

/// What the pool needs from its node. Each default says why and which way
/// it fails.
struct pool_config {
  std::string node_id;
  /// Parent of the workers' sandbox dirs: the node's <state>/sandboxes, so
  /// disk quotas apply and a crashed node's next start reaps leftovers (they
  /// have no record.json).
  std::string sandboxes_dir;
  /// The worker image: it must hold /usr/bin/python3 and /bin/bash.
  std::vector<std::string> layers = {"base/python@3.11"};
  /// Warm workers kept even when idle: two cover a sequential caller plus
  /// one replacement in flight. More costs ~15 MB each.
  size_t min_workers = 2;
  /// Start the minimum at once; otherwise the pool warms on its first call
  /// (that call waits ~0.3 s for a worker). Off by default: most nodes never
  /// serve an fncall, and two idle python sandboxes per node would show in
  /// every node's sandbox dir and cgroups.
  bool prewarm = false;
  /// Upper bound under load: on a 2-core node 8 keeps both cores busy while
  /// calls wait on I/O; more only adds memory and context switches.
  size_t max_workers = 8;
  /// Calls waiting for a worker; beyond it submit answers resource_exhausted
  /// (429) at once instead of letting latency grow without bound.
  size_t max_queue = 1024;
  /// An extra worker idle this long is destroyed (shrink when demand falls).
  std::chrono::milliseconds idle_shrink{30000};
  /// Added to a call's timeout_s before the node gives up on its worker (the
  /// server enforces timeout_s itself; this only catches a stopped server).
  std::chrono::milliseconds grace{3000};
  /// Mounts `refs`; blocking (manager thread only).
  std::function<expected<mounted_layers>(const std::vector<std::string>& refs)> acquire;
  /// Releases what acquire returned.
  std::function<void(const std::vector<std::string>& digests)> release;
};

/// Completion of one call; runs on a pool thread (or the caller's, for a call
/// refused at once) and must not block.
using done_fn = std::function<void(expected<exec_result>)>;

/// Counters for /metrics, tests and the bench.
struct pool_stats {
  size_t workers = 0;   ///< alive (idle + busy)
  size_t idle = 0;
  size_t starting = 0;
  size_t queued = 0;
  uint64_t calls = 0;     ///< answered calls
  uint64_t replaced = 0;  ///< workers retired because they died, hung or were tainted
  uint64_t started = 0;   ///< workers started
  /// Host pids of the alive workers' sandbox inits (tests kill servers via /proc).
  std::vector<int> init_pids;
};

class pool {
 public:
  virtual ~pool() = default;

  /// Validates and runs `req` on a warm worker; `done` gets the result or an
  /// error (invalid_argument / too_large for bad input, resource_exhausted
  /// when the queue is full, unavailable when no worker can be started or
  /// the worker died during the call). Never blocks.
  virtual void submit(fncall_request req, done_fn done) = 0;

  virtual pool_stats stats() = 0;

  /// Fails queued calls, destroys every worker and stops the threads.
  /// Blocking; idempotent. The destructor calls it.
  virtual void shutdown() = 0;
};

/// Starts a pool over `backend` (the container backend) and begins warming
/// `min_workers` in the background.
std::shared_ptr<pool> start_pool(std::shared_ptr<backend> b, pool_config cfg);

/// The fork server's Python program (fork_server/*.py, put together by embed.py).
extern const char* const fork_server_source;

} // namespace dsec::backends::fncall
