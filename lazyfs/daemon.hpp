// The lazy blob daemon's life: one `dsec lazyfs` process per store root,
// serving <store>/lazy/mnt (blob_fs.hpp) and outliving the node that started
// it, so a node killed with -9 leaves its sandboxes reading lazy layers and
// the restarted node finds the daemon again.
//
//   <store>/lazy/daemon.lock   flock(2) held by the serving daemon for its life
//   <store>/lazy/daemon.json   {"pid", "cache", "stats"}: who serves, where counters are
//   <cache>/stats.json         the counters (stats.hpp)
//   <cache>/daemon.log         the daemon's stdout and stderr
//
// ensure_daemon() reuses a daemon that holds the lock and whose mount is
// live, else cleans a stale mount ("Transport endpoint is not connected",
// the daemon died) and spawns one detached: double fork, setsid (its own
// session and process group, so kill -9 of the node's group spares it), an
// empty signal mask, stdio to the log, every other fd closed, then exec of
// this binary as `dsec lazyfs ...`. It waits (bounded) until the mount is live.
// Each node holds a shared flock on <store>/lazy/users.lock while it lives;
// release_daemon() at its clean stop stops the daemon only when no other
// node on the host still holds it. stop_daemon() unmounts the FUSE mount (the daemon's loop ends and it exits)
// when no blob is open, and waits until the lock is free.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "lazyfs/blob_fs.hpp"
#include "registry/registry_options.hpp"
#include "sys/fd.hpp"

namespace dsec::lazyfs {

/// The chunk cache budget when --chunk-cache-mb is not given, MiB: a tenth
/// of the cache's file system, at least 2 GiB and at most 64 GiB, and at
/// most half of what is free there when the daemon starts (never under
/// 256 MiB). The cache is disk, not memory, and a constant was too small:
/// chunks that an image's next sandbox reads again are kept only while the
/// sandboxes between the two fetch less than the budget, and each fetches
/// ~30 MB of a 200 MB image (bench/registry_bench.py: 256 sandboxes over 85
/// images fetched 12.85 GB with 2 GiB, 7.83 GB with 8 GiB). Past the budget
/// the least recently used chunks are fetched again (more registry traffic,
/// never an error).
uint64_t default_chunk_cache_mb(uint64_t fs_bytes, uint64_t free_bytes);

struct daemon_options {
  std::string store_root;
  /// The chunk cache and the daemon's log and stats.
  std::string cache_dir;
  /// 0: default_chunk_cache_mb() of the cache directory's file system.
  uint64_t chunk_cache_mb = 0;
  /// How the daemon reaches registries (given to it as flags).
  registry::registry_options registry;
  /// The dsec binary to run; empty: this process's own (/proc/self/exe).
  std::string exe;
  /// How long ensure_daemon waits for the mount to go live. A daemon starts
  /// in a few ms; 10 s covers a loaded host, and a failure names the log.
  std::chrono::milliseconds start_timeout{10000};
};

/// Who serves a store.
struct daemon_info {
  /// The caller's shared flock on <store>/lazy/users.lock, held while it
  /// lives (set by ensure_daemon): a node killed with -9 drops it with its
  /// fds, so release_daemon of the last clean node can stop the daemon.
  std::shared_ptr<sys::unique_fd> hold;
  int64_t pid = 0;
  std::string mount_dir;
  std::string cache_dir;
  std::string stats_path;
  /// True when a running daemon was found, false when this call started one.
  bool reused = false;
};

/// Makes sure a daemon serves `opts.store_root` (see above). Blocking.
expected<daemon_info> ensure_daemon(const daemon_options& opts);

/// The daemon serving `store_root` now; not_found if none.
expected<daemon_info> find_daemon(const std::string& store_root);

/// Stops the daemon of `store_root` if no blob is open (a layer mount of
/// this or another node on the host still reading keeps it: the answer says
/// so and the daemon stays). Cleans a stale mount. Waits at most `wait`
/// for the process to go, then SIGKILLs it. Blocking.
status stop_daemon(const std::string& store_root,
                   std::chrono::milliseconds wait = std::chrono::milliseconds{10000});

/// Drops `info.hold` and, when no other user (node) holds the store's
/// users lock and no blob is open, stops the daemon as stop_daemon does.
/// Another user still there is not an error: the daemon stays.
status release_daemon(daemon_info& info,
                      std::chrono::milliseconds wait = std::chrono::milliseconds{10000});

/// True when `dir` is a live FUSE mount (statfs answers with FUSE's magic).
bool mount_is_live(const std::string& dir);

/// The daemon process itself (`dsec lazyfs`): takes the store's lock (an
/// error if another daemon holds it), opens the chunk cache, records itself
/// in daemon.json, writes stats.json while it serves, and serves
/// <store>/lazy/mnt until unmounted or signalled. Returns the exit code.
int run_daemon(const daemon_options& opts, std::shared_ptr<range_fetcher> fetcher);

/// The `dsec lazyfs` arguments that reproduce `opts` (for the spawn).
std::vector<std::string> daemon_args(const daemon_options& opts);

} // namespace dsec::lazyfs
