// The sandbox's process table as dsec-init sees it in its /proc (the
// sandbox's own pid namespace in a container; the whole guest in a VM), and
// signalling one process of it on the node's behalf.
#pragma once

#include <sys/types.h>

#include <vector>

#include "backends/channel/protocol.hpp"

namespace dsec::init {

/// Every process of /proc except kernel threads, pid order, at most
/// init_proto::max_ps_entries. Processes that exit while being read are
/// skipped.
std::vector<init_proto::proc_entry> list_processes();

/// The CPU time the kernel this init runs on spent busy, ns: user, nice,
/// system, irq, softirq and steal of /proc/stat's "cpu" line (all CPUs).
/// A guest's own; in a container it is the host's (the node asks guests only).
uint64_t busy_cpu_ns();

/// kill(2) for the node: 0 or an errno. Refuses (EPERM) pid 1 and init
/// itself, and pids below 1 (no "every process" or "my group" forms).
int signal_process(const init_proto::signal_msg& m);

/// kill(2) of `pid` (its process group if `group`), also when it runs as
/// another user: init holds no CAP_KILL, so a child that becomes the uid
/// owning /proc/<pid> sends it (issue 27: E2B's commands run as `user`).
/// 0 or an errno.
int kill_as_owner(pid_t pid, int signo, bool group);

} // namespace dsec::init
