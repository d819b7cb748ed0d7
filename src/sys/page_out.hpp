// Page-out of a process's memory from outside it (process_madvise with
// MADV_PAGEOUT over every mapping): clean file pages are dropped at once,
// anonymous pages go to swap when the host has any (the node's zram). Used
// by pause (after the freeze) and by reclaim of idle sandboxes. Works on
// frozen tasks; tmpfs pages nobody maps are out of its reach (the cgroup's
// squeeze_memory gets those).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace dsec::sys {

/// Advises MADV_PAGEOUT over every mapping of `pid`; returns the bytes the
/// kernel took the advice for (mapped, not what left RAM). Best effort: a
/// process that exits meanwhile or a kernel without process_madvise gives 0.
int64_t page_out(pid_t pid);

/// page_out of each pid; the sum.
int64_t page_out(const std::vector<pid_t>& pids);

} // namespace dsec::sys
