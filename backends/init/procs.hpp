// The sandbox's process table as dsec-init sees it in its /proc (the
// sandbox's own pid namespace in a container; the whole guest in a VM), and
// signalling one process of it on the node's behalf.
#pragma once

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

} // namespace dsec::init
