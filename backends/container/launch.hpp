// The host-side mechanisms behind create() and recover(): the sealed copy of
// dsec-init, the overlay mount, the control socket, the clone of init into
// new namespaces, and the meta file that lets a restarted node find its
// sandboxes again. Internal to the container backend.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// The init binary as a sealed memfd (no write, grow, shrink, or new seals).
struct launch_image {
  sys::unique_fd memfd;
  sys::unique_fd devnull; ///< init's stdin/stdout/stderr
};

/// Copies `path` into a sealed memfd once per backend.
expected<launch_image> seal_init_binary(const std::string& path);

/// Mounts overlayfs at <dir>/rootfs (host mount namespace) with upper and
/// work dirs in <dir>; `lower_dirs` bottom first.
status mount_overlay(const std::string& dir, const std::vector<std::string>& lower_dirs);

/// The listening socket at <dir>/ctl.sock (given to init) and the node's
/// connected end (already queued in the backlog, answered once init runs).
struct control_socket {
  sys::unique_fd listener;
  sys::unique_fd client;
};
expected<control_socket> make_control_socket(const std::string& dir);

/// Connects anew to <dir>/ctl.sock (recover); init takes the newest peer.
expected<sys::unique_fd> connect_control_socket(const std::string& dir);

/// A started init.
struct launched {
  pid_t pid = -1;
  sys::unique_fd pidfd;
};

/// Clones init into new pid, mount, uts, ipc and net namespaces with
/// `listener` as its fd 3 and nothing else of ours open. Before it execs,
/// the child writes itself into every `cgroup.procs` of `join` (open for
/// writing), so init runs, and its memory is charged, inside the sandbox's
/// cgroups from its first instruction.
expected<launched> launch_init(const launch_image& img, int listener,
                               const std::vector<int>& join);

/// SIGKILL through the pidfd and wait for the exit (reaps if it is a child).
void kill_and_reap(int pidfd);

/// What <dir>/meta records.
struct sandbox_meta {
  pid_t pid = -1;
  uint64_t start_time = 0; ///< field 22 of /proc/<pid>/stat: guards pid reuse
  std::string node_id;
  std::map<std::string, std::string> env; ///< spec env, needed by every exec
};

/// Writes <dir>/meta for `m` (start_time is filled in from /proc).
status write_meta(const std::string& dir, sandbox_meta m);
expected<sandbox_meta> read_meta(const std::string& dir);

/// A pidfd of the init recorded in `m`, after checking it is still that
/// process (same start time).
expected<sys::unique_fd> open_init(const sandbox_meta& m, const std::string& id);

} // namespace dsec::backends
