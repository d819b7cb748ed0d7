// Sandbox setup steps that dsec-init runs on itself, as PID 1 of fresh pid,
// mount, uts, ipc and net namespaces, before it answers `ready`: a checklist
// in the spirit of crun's setup_* steps. Each step returns an empty string on
// success or a message naming operation, object and errno, which the node
// returns from create().
#pragma once

#include <string>

#include "backends/channel/protocol.hpp"

namespace dsec::init {

/// "op obj: ENAME (text)" for the current errno.
std::string errno_message(const char* op, const std::string& obj, int err);

/// Cgroup namespace, private mounts, the root attached at cfg.rootfs (from
/// init_proto::root_mount_fd, if cfg.attach_root), /dev, /proc, /sys,
/// pivot_root into cfg.rootfs, hostname, loopback up.
std::string setup_namespaces(const init_proto::config_msg& cfg);

/// rlimits (open files at most 65536, no core dumps), no_new_privs,
/// securebits, every capability set emptied, then
/// `seccomp_bpf` (raw sock_filter instructions from the node) installed with
/// TSYNC. After this init itself has no privilege left. A malformed program
/// is an error: init never runs unfiltered.
std::string drop_privileges(const std::string& seccomp_bpf);

} // namespace dsec::init
