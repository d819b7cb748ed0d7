// What a container sandbox uses, and reclaim of its cold memory, for the
// node's reclaim actor. Both read and act on the sandbox's cgroup: usage()
// is a few counter reads (memory.stat, the v2 cpu.stat); reclaim() pages out
// what the sandbox's processes map (sys/page_out.hpp) without stopping them,
// so the pages they touch again come back from zram on their next fault.
// It does not squeeze the memory limit: a running task that allocates under
// a lowered limit can be OOM-killed, and a sandbox must not die of the
// node's bookkeeping (pause, which freezes first, squeezes).
//
// A page-out into zram frees each page at once (the device writes
// synchronously). Into a disk swap file the writes are asynchronous, and
// every page stays in the swap cache, still charged to the group and not
// counted by MemAvailable, until reclaim drops it: 2,000 python agents
// reclaimed this way left 6.6 GiB there and admission refused every create
// with the host's RAM free for the taking (density bench, 2026-12-02). So
// when the page-out leaves swap cache behind, reclaim() also empties the
// group (force_empty waits for the writes, then drops the clean pages), and
// resident counts the swap cache.
#include <algorithm>

#include "backends/container/container_sandbox.hpp"
#include "sys/page_out.hpp"

namespace dsec::backends {

namespace {

/// Swap cache left after a page-out worth a force_empty (a few pages in
/// flight are not).
constexpr int64_t swapcache_drop_bytes = int64_t{1} << 20;

usage_sample to_sample(const sys::cgroup_usage& u) {
  usage_sample s;
  // RAM = anonymous + page cache (tmpfs included) charged to the group;
  // memory.usage_in_bytes when memory.stat could not be read.
  s.resident_bytes = u.rss_bytes >= 0 && u.cache_bytes >= 0
                       ? u.rss_bytes + u.cache_bytes + std::max<int64_t>(0, u.swapcached_bytes)
                       : std::max<int64_t>(0, u.memory_bytes);
  s.swap_bytes = std::max<int64_t>(0, u.swap_bytes);
  s.cpu_ns = std::max<int64_t>(0, u.cpu_ns);
  return s;
}

} // namespace

expected<usage_sample> container_sandbox::usage() {
  if (channel_->gone())
    return unavailable("measure usage of " + parts_.id + ": sandbox is gone");
  if (!parts_.cgroup)
    return internal_error("measure usage of " + parts_.id + ": no cgroup");
  auto u = parts_.cgroup->usage();
  if (u.memory_bytes < 0 && u.rss_bytes < 0)
    return unavailable("measure usage of " + parts_.id + ": its memory cgroup is unreadable");
  return to_sample(u);
}

expected<int64_t> container_sandbox::reclaim() {
  std::lock_guard<std::mutex> once(destroy_m_); // not while destroy or pause runs
  if (channel_->gone())
    return unavailable("reclaim memory of " + parts_.id + ": sandbox is gone");
  if (!parts_.cgroup)
    return internal_error("reclaim memory of " + parts_.id + ": no cgroup");
  auto before = to_sample(parts_.cgroup->usage()).resident_bytes;
  sys::page_out(parts_.cgroup->processes());
  auto left = parts_.cgroup->usage();
  if (left.swapcached_bytes >= swapcache_drop_bytes)
    (void)parts_.cgroup->reclaim_all_memory(); // best effort: resident says what stayed
  auto after = to_sample(parts_.cgroup->usage()).resident_bytes;
  return std::max<int64_t>(0, before - after);
}

} // namespace dsec::backends
