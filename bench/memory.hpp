// Memory accounting for the idle-sandbox measurement: proportional (PSS) and
// resident (RSS) sizes of processes from /proc, memory cgroup (v1) usage, and
// the process sets to sum over (a cgroup tree, or a process and its
// descendants). PSS splits pages shared between sandboxes (the busybox binary,
// a layer's page cache) among them, so a sum of PSS counts each page once.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dsec::bench {

/// Sizes of one process, in KiB; zeros if it is gone.
struct proc_mem {
  double rss_kb = 0;
  double pss_kb = 0;
};

/// Reads /proc/<pid>/smaps_rollup.
proc_mem read_proc_mem(pid_t pid);

/// Sum of read_proc_mem over `pids`.
proc_mem sum_proc_mem(const std::vector<pid_t>& pids);

/// Every pid listed in cgroup.procs of `dir` and of all cgroups below it.
std::vector<pid_t> cgroup_tree_procs(const std::string& dir);

/// memory.usage_in_bytes of a v1 memory cgroup dir in KiB, or -1 if unreadable.
double cgroup_usage_kb(const std::string& dir);

/// `roots` plus all their descendants (one scan of /proc).
std::vector<pid_t> with_descendants(const std::vector<pid_t>& roots);

/// The pid of a running `dsec node` (comm "dsec", "node" in argv), or -1.
pid_t find_dsec_node();

/// A small text file (e.g. under /proc or /sys), "" if unreadable.
std::string read_small_file(const std::string& path);

} // namespace dsec::bench
