// Reclaim and memory admission as pure functions (no CAF, so unit tests link
// it alone). The reclaim actor (actors/reclaim.hpp) feeds it samples and does
// what it says; the lifecycle actor asks it whether a create fits.
//
// Idle: a sandbox is idle once its CPU time has not grown by more than
// `idle_cpu_share` of one core between samples for `idle_ms`. Reclaiming an
// idle sandbox pushes its cold memory into the node's compressed swap; it is
// not reclaimed again while it stays idle unless its resident grew by
// `regrow_bytes` since (a second squeeze right away frees nothing). Work
// wakes it: it leaves idle, and the next idle stretch may reclaim it again.
//
// Which first: the largest resident first (each call frees the most), ties
// by longest idle (coldest), then id. A pass is sized by the backlog: it
// takes every sandbox that wants reclaim, up to `max_per_pass`, and works
// through them until `pass_budget_ms` is spent; the rest stay wanted and
// lead the next pass. So one pass holds one worker for a bounded time, and a
// burst of creates that leaves hundreds of idle agents behind is drained at
// the speed reclaim runs, not 4 per interval (which creates outran at ~1,200
// python agents in stop 20's density run).
//
// Admission by measured memory. The measured figure is the host's
// MemAvailable, not the sum of sandboxes' resident: it also counts the node
// itself, the shared layer page cache, VM processes and every other tenant of
// the host, and it is the kernel's own estimate of what new allocations get
// without swapping (reclaim into zram raises it). A create fits when
//
//     MemAvailable - reserved - headroom >= need
//
// where `reserved` is the need of creates admitted since the sample (a burst
// inside one sample period does not all see the same free memory), `need`
// the new sandbox's expected use (expected_need_mb: its limit, capped by what
// this node's sandboxes measure, at least a floor), and `headroom` what the
// kernel and the node keep for themselves. When it does not fit, the node
// first reclaims the idle sandboxes and decides again on the fresh sample
// that pass takes (memory may also have been freed since the last one);
// only then it refuses (429). Passes coalesce, so a storm of creates at a
// full node costs one pass per round, not one per create.
//
// Overcommit cap: the sum of memory limits may reach `overcommit` x
// (MemTotal + SwapTotal). Limits are what sandboxes may grow to; the measured
// check admits by what they use now, and the cap bounds the damage when they
// all grow at once (a trainer's whole batch runs pip install): memcg limits
// protect sandboxes from each other, not the host from all of them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace dsec::reclaim {

/// Tunables of idle detection and reclaim.
struct tunables {
  /// No CPU growth for this long = idle (--reclaim-idle-s). 30 s: an agent
  /// thinking between tool calls (an LLM turn is seconds) stays warm; too
  /// small squeezes sandboxes that are about to run again (their next exec
  /// faults pages back in), too large leaves idle memory in RAM.
  int64_t idle_ms = 30000;
  /// CPU growth below this share of one core between samples still counts
  /// as idle: an idle init and a sleeping shell tick a little.
  double idle_cpu_share = 0.02;
  /// An idle, reclaimed sandbox is reclaimed again only after its resident
  /// grew by this much (8 MiB: below it a pass costs more than it frees).
  int64_t regrow_bytes = 8 << 20;
  /// Reclaim calls a pass may take on (each costs ~50-60 ms of CPU per
  /// 27 MiB python agent into lzo zram here). 64: a pass is bounded by the
  /// budget below long before this on real agents; it caps the list a pass
  /// carries when the sandboxes are tiny.
  size_t max_per_pass = 64;
  /// Wall time a pass spends reclaiming before it stops and leaves the rest
  /// to the next (2 s: one of the pool's 16 workers, about 30 agents a pass;
  /// longer delays the next sample admission reads, shorter drains slower).
  int64_t pass_budget_ms = 2000;
  /// Running sandboxes a pass measures at most, the longest unmeasured
  /// first; the others keep their last sample. Each measure reads three
  /// cgroup files (memory.stat, whose hierarchical totals the kernel sums
  /// on read, usage, the v2 cpu.stat): at 3,200 sandboxes every second that was the
  /// node's largest cost past the creates themselves, and creates/s at
  /// N=3,200 fell to a third of N=0 (issue 28). 256: up to 256 sandboxes,
  /// every one is measured every pass as before; at 3,200 each is measured
  /// every 13 s, well inside idle_ms. Larger costs CPU in proportion; smaller
  /// blurs idle detection and the mean resident admission reads.
  size_t max_samples_per_pass = 256;
};

/// What the reclaim actor keeps per sandbox between samples.
struct tracked {
  /// -1 until the first sample.
  int64_t last_cpu_ns = -1;
  int64_t last_sample_ms = 0;
  /// Unix ms since which its CPU has not grown; 0 = busy.
  int64_t idle_since_ms = 0;
  int64_t resident_bytes = 0;
  int64_t swap_bytes = 0;
  /// Bytes reclaim freed from it in total.
  int64_t reclaimed_bytes = 0;
  /// Its lowest resident since it was reclaimed in this idle stretch; -1 =
  /// not reclaimed since it last went idle.
  int64_t resident_after_reclaim = -1;
};

/// The sandboxes of `running` a pass measures: all of them up to
/// tun.max_samples_per_pass, else that many, the least recently measured
/// first (never measured before all; ties by id), so every one comes round.
std::vector<std::string> pick_samples(const std::map<std::string, tracked>& running,
                                      const tunables& tun);

/// Takes a new sample at `now_ms` (unix ms) into `t`.
void observe(tracked& t, const usage_sample& s, int64_t now_ms, const tunables& tun);

/// Idle for at least tun.idle_ms at `now_ms`.
bool is_idle(const tracked& t, int64_t now_ms, const tunables& tun);

/// Idle, and not reclaimed in this idle stretch (or grown since).
bool wants_reclaim(const tracked& t, int64_t now_ms, const tunables& tun);

/// Records that a reclaim freed `freed` bytes.
void record_reclaim(tracked& t, int64_t freed);

/// Which sandboxes to reclaim now, in order, at most `max` (see file comment).
std::vector<std::string> pick(const std::map<std::string, tracked>& all, int64_t now_ms,
                              const tunables& tun, size_t max);

/// Resident of the sandboxes reclaim would take now, bytes: what a create
/// under pressure can hope reclaim frees.
int64_t reclaimable_bytes(const std::map<std::string, tracked>& all, int64_t now_ms,
                          const tunables& tun);

// -- host memory and admission ----------------------------------------------

/// The host's memory as /proc/meminfo tells it, MiB.
struct host_memory {
  bool known = false;
  int64_t total_mb = 0;
  int64_t available_mb = 0;
  int64_t swap_total_mb = 0;
  int64_t swap_free_mb = 0;
};

/// One sandbox's figures in a memory_report.
struct sandbox_memory {
  std::string id;
  int64_t resident_bytes = 0;
  int64_t swap_bytes = 0;
  int64_t reclaimed_bytes = 0;
  /// Unix ms; 0 = busy.
  int64_t idle_since_ms = 0;
};

/// What the reclaim actor measured in one pass (sent to the lifecycle actor).
struct memory_report {
  host_memory host;
  /// The sandboxes measured (running ones with a backend that can tell).
  std::vector<sandbox_memory> sandboxes;
  /// Bytes reclaim freed on this node since it started.
  int64_t reclaimed_bytes_total = 0;
  /// Sandboxes idle past the threshold.
  int64_t idle = 0;
  /// What reclaim could still free now (reclaimable_bytes).
  int64_t reclaimable_bytes = 0;
  /// Mean resident of the measured sandboxes (0 = none), for expected_need_mb.
  int64_t mean_resident_bytes = 0;
};

/// Parses /proc/meminfo text; known = false without MemTotal and MemAvailable.
host_memory parse_meminfo(std::string_view text);

/// A sandbox with no measurement to go by is expected to use this much: a
/// container with a python agent measured 19-20 MiB idle (TOOLCHAIN.md), with
/// some room for its first commands.
constexpr int64_t need_floor_mb = 32;

/// What a new sandbox with limit `memory_mb` is expected to use: the mean
/// measured resident of this node's sandboxes (0 = none measured), at least
/// need_floor_mb, never more than its limit.
int64_t expected_need_mb(int64_t memory_mb, int64_t mean_resident_mb);

/// Limits the admission holds to (node flags).
struct admission_limits {
  /// --memory-headroom-mb. 512 MiB: the kernel's watermarks, the node's own
  /// growth and the layer page cache; too small lets a burst push the host
  /// into the OOM killer, too large refuses creates early.
  int64_t headroom_mb = 512;
  /// --overcommit: the sum of limits may reach this x (RAM + swap); 0 = no
  /// cap. 16: at the cap, RAM + zram hold every sandbox growing to 1/16 of
  /// its limit at once (32 MiB of 512: an idle python agent measures ~20
  /// MiB); growth past that is what the measured check refuses new creates
  /// for. Too high lets a correlated growth (a batch's pip install) exhaust
  /// RAM + zram; too low refuses sandboxes the node could hold (8 stopped a
  /// 3200 x 96 MiB density run on 24 GiB + 6 GiB zram; 16 holds 960 of 512).
  double overcommit = 16;
};

/// One create to decide.
struct admission_input {
  host_memory host;
  /// Needs of creates admitted since the sample, MiB.
  int64_t reserved_mb = 0;
  /// Sum of memory limits of this node's sandboxes, MiB.
  int64_t committed_mb = 0;
  /// The new sandbox's limit and expected need, MiB.
  int64_t memory_mb = 0;
  int64_t need_mb = 0;
  /// A reclaim for this create already ran (decide on its fresh sample).
  bool reclaim_tried = false;
};

enum class verdict {
  admit,
  /// No sample yet, or short of memory: reclaim the idle sandboxes (and
  /// sample), then decide again with reclaim_tried.
  reclaim_first,
  /// Short of measured memory: 429.
  refuse_memory,
  /// Limits past the overcommit cap: 429.
  refuse_overcommit,
};

/// What admission says, and the figures its message names.
struct admission {
  verdict v = verdict::admit;
  /// MemAvailable - reserved, MiB (what new sandboxes can get before headroom).
  int64_t available_mb = 0;
  /// The overcommit cap, MiB (0 = none).
  int64_t cap_mb = 0;
};

/// Decides one create (see the file comment).
admission decide(const admission_input& in, const admission_limits& lim);

/// The 429 message for a refusal ("create: node n1 has 300 MiB of memory
/// available, needs 32 MiB plus 512 MiB headroom; retry later or elsewhere").
std::string refusal_message(const std::string& node, const admission_input& in,
                            const admission_limits& lim, const admission& a);

/// Memory that new sandboxes can still get on this node, MiB (never below
/// 0): MemAvailable - reserved - headroom. The node gossips it as
/// free_memory_mb, so placement scores by the figure admission decides by.
int64_t free_for_sandboxes_mb(const host_memory& host, int64_t reserved_mb,
                              const admission_limits& lim);

} // namespace dsec::reclaim
