// Control groups of one sandbox, behind an interface that fits both cgroup v1
// (one directory per controller) and v2 (one directory, unified). This host
// is hybrid: v1 controllers at <root>/<controller> and a v2 hierarchy at
// <root>/unified with no controllers but where eBPF programs attach; the v1
// implementation therefore also makes the sandbox's v2 directory and puts
// processes in both.
//
// Layout: every controller directory is <root>/<ctrl>/<rel>, with rel =
// "dsec/<node id>/<sandbox id>". Parents are created on demand and kept.
// The cpu controller's directory may sit elsewhere (cpu_rel: a batch
// sandbox's is under an idle top-level group, backends/policy/cpu_class)
// and move there and back with its tasks (move_cpu).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::sys {

/// Resource limits of one sandbox. Zero means "no limit" for every field.
struct cgroup_limits {
  /// CPU cores, may be fractional (CFS quota over a 100 ms period).
  double cpu = 0;
  int64_t memory_bytes = 0;
  int64_t pids = 0;
};

/// What the memory controller saw, for reporting why a sandbox died.
struct memory_events {
  /// Times the OOM killer killed a process of the group.
  int64_t oom_kills = 0;
  /// Times the limit was hit (v1 memory.failcnt).
  int64_t limit_hits = 0;
};

/// What the memory controller and the CPU time count for a group now (bytes,
/// nanoseconds); -1 where a counter could not be read.
struct cgroup_usage {
  /// memory.usage_in_bytes: RAM charged to the group (page cache included).
  int64_t memory_bytes = -1;
  /// memory.stat total_rss: anonymous memory in RAM.
  int64_t rss_bytes = -1;
  /// memory.stat total_cache: page cache in RAM, tmpfs/shmem included.
  int64_t cache_bytes = -1;
  /// memory.stat total_shmem: of the cache, tmpfs and shared memory.
  int64_t shmem_bytes = -1;
  /// memory.stat total_swap: the group's pages in swap.
  int64_t swap_bytes = -1;
  /// memory.stat total_swapcached: pages written to swap that still sit in
  /// RAM (the swap cache). A page-out to a disk file leaves every page here
  /// until its write completes and reclaim drops it; MemAvailable does not
  /// count them, so they are RAM the group holds. -1 on kernels without it.
  int64_t swapcached_bytes = -1;
  /// CPU time of every task since the group was made (usage_usec of the
  /// v2 group's cpu.stat; cpuacct.usage on a host without v2).
  int64_t cpu_ns = -1;
};

/// The cgroup directories of one sandbox. Not thread-safe; one owner.
class cgroup {
 public:
  virtual ~cgroup() = default;

  /// Writes the limits (cpu quota, memory limit, pids max). The memory limit
  /// caps RAM and, where the kernel accounts swap (v1 memory.memsw.*), RAM
  /// plus swap alike, so a sandbox cannot fill the node's swap either.
  virtual status apply(const cgroup_limits& limits) = 0;

  /// Moves `pid` (a whole process) into every directory of the group.
  virtual status add_process(pid_t pid) = 0;

  /// Processes in the group (from the pids controller), for cleanup.
  virtual std::vector<pid_t> processes() const = 0;

  /// OOM counters of the memory controller.
  virtual memory_events memory() const = 0;

  /// An eventfd that becomes readable each time the memory controller hits
  /// an out-of-memory condition in the group (v1 cgroup.event_control on
  /// memory.oom_control). The caller owns it.
  virtual expected<int> oom_eventfd() const = 0;

  /// Memory and CPU counters now. A few small file reads.
  virtual cgroup_usage usage() const { return {}; }

  /// Lowers the memory limit in steps toward `floor_bytes` so the kernel
  /// reclaims the group's memory (anonymous and tmpfs pages into swap, page
  /// cache dropped), then puts the limit back; the RAM+swap limit stays as
  /// it was throughout. Returns the bytes that left the group's RAM. A step
  /// the kernel cannot reach (EBUSY) ends the squeeze. Only for a group that
  /// does not allocate meanwhile (frozen): a task charging memory under the
  /// lowered limit may be OOM-killed. Blocking (reclaim compresses pages).
  virtual expected<int64_t> squeeze_memory(int64_t floor_bytes) {
    (void)floor_bytes;
    return unavailable("squeeze memory: not supported by this cgroup");
  }

  /// Reclaims all the kernel can of the group's memory now (v1
  /// memory.force_empty: anonymous and tmpfs pages into swap, page cache
  /// dropped), the limits untouched; it refreshes the memcg statistics
  /// reclaim decides by first (stale ones left 64 of 200 MiB of /dev/shm
  /// pages in RAM after a page-out). Returns the bytes that left the group's
  /// RAM. For a frozen or idle group: it reclaims the working set too.
  /// Blocking.
  virtual expected<int64_t> reclaim_all_memory() {
    return unavailable("reclaim memory: not supported by this cgroup");
  }

  /// Freezes (true) or thaws (false) every process of the group.
  virtual status freeze(bool frozen) = 0;

  /// The freezer holds the group frozen, or is on its way there (a freeze
  /// that was cut short). False if the state cannot be read.
  virtual bool frozen() const { return false; }

  /// Removes every directory, retrying while the kernel still reports EBUSY
  /// (tasks that are exiting) up to about a second. Missing dirs are fine.
  /// Idempotent.
  virtual status remove() = 0;

  /// Moves the cpu controller's directory to <root>/cpu/<rel> with every
  /// task in it (the other controllers stay): makes the directory (keeping
  /// one that exists), copies the CFS period and quota, moves every process
  /// (re-reading the list until it is empty, so one forked meanwhile moves
  /// too) and removes the old directory. On failure the tasks moved so far
  /// go back and the group stays where it was. Blocking (small file writes).
  virtual status move_cpu(const std::string& rel) {
    (void)rel;
    return unavailable("move cpu group: not supported by this cgroup");
  }

  /// Every directory this group owns, for tests and diagnostics.
  virtual std::vector<std::string> paths() const = 0;

  /// The v2 (unified) directory where eBPF programs attach; empty if none.
  virtual std::string unified_path() const = 0;
};

/// Creates (mkdir -p) the directories of `rel` under `root` in the v1
/// controllers cpu, memory, pids, freezer and in the v2 hierarchy
/// <root>/unified when it exists (else in cpuacct too); the cpu directory at `cpu_rel` instead
/// when that is not empty. On failure, what it made is removed.
expected<std::unique_ptr<cgroup>> create_cgroup_v1(const std::string& root,
                                                   const std::string& rel,
                                                   const std::string& cpu_rel = {});

/// Removes the directories of `rel` and then of each of its parents (up to
/// `root`) in every hierarchy, as long as they are empty: one rmdir each, no
/// retry, errors ignored. Shared parents such as "dsec" go with the last node.
void prune_cgroup_v1(const std::string& root, const std::string& rel);

/// Opens existing directories of `rel` (after a node restart) without
/// creating anything; remove() and memory() work on them. `cpu_rel` as for
/// create_cgroup_v1.
std::unique_ptr<cgroup> open_cgroup_v1(const std::string& root, const std::string& rel,
                                       const std::string& cpu_rel = {});

} // namespace dsec::sys
