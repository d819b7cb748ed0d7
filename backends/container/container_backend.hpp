// The container backend: a sandbox is an overlay root over the node's layer
// mounts, v1 cgroups (plus the v2 directory for eBPF), and our static
// dsec-init as PID 1 of new pid, mount, uts, ipc, net and cgroup namespaces.
// Init sets the sandbox up on itself, drops every privilege, loads the
// seccomp filter and then runs exec requests sent over a unix socket that
// lives outside the sandbox root (<dir>/ctl.sock).
//
// Files in a sandbox's <dir>: upper/ and work/ (the overlay's writable
// half), rootfs/ (an empty dir on the host: init mounts the merged root on
// it inside the sandbox's own mount namespace; the node reaches files
// through a detached clone of that mount, see launch.hpp), ctl.sock, meta
// (init pid and start time, for recover()).
#pragma once

#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "sys/quota_volume.hpp"

namespace dsec::backends {

/// Node-wide settings of the container backend.
struct container_config {
  /// Cgroups live at <ctrl>/dsec/<node_id>/<sandbox id>.
  std::string node_id;
  /// Path of the static dsec-init binary; copied once into a sealed memfd,
  /// so a sandbox can never write the host binary through /proc/1/exe.
  std::string init_path;
  /// Where the cgroup controllers are mounted.
  std::string cgroup_root = "/sys/fs/cgroup";
  /// The volume sandbox dirs live on, for `disk_mb`; null = not enforced.
  std::shared_ptr<const sys::quota_volume> quota;
};

/// Makes the backend. Never fails itself: a missing init binary or broken
/// setup makes every create() return the error instead.
std::unique_ptr<backend> make_container_backend(const container_config& cfg);

} // namespace dsec::backends
