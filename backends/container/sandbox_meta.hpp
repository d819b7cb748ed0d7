// The meta file of a sandbox (<dir>/meta), written at each boot beside
// init's control socket: what lets a restarted node find the sandbox's init
// (pid and start time, so a reused pid is never taken for it), its node,
// the spec's env and where its root is held.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// What <dir>/meta records.
struct sandbox_meta {
  pid_t pid = -1;
  uint64_t start_time = 0; ///< field 22 of /proc/<pid>/stat: guards pid reuse
  std::string node_id;
  std::map<std::string, std::string> env; ///< spec env, needed by every exec
  /// Where a restarted node finds the root: true = init holds the node view
  /// (init_proto::root_view_fd); false = a sandbox made by a node before
  /// roots left the host namespace, mounted at <dir>/rootfs on the host.
  bool root_held_by_init = true;
};

/// Removes what each boot of a sandbox makes anew in <dir> (init's control
/// socket and the meta file), keeping its files for the next boot (a
/// powered-off sandbox). Missing ones are fine; the first other error.
status remove_boot_files(const std::string& dir);

/// Writes <dir>/meta for `m` (start_time is filled in from /proc).
status write_meta(const std::string& dir, sandbox_meta m);
expected<sandbox_meta> read_meta(const std::string& dir);

/// A pidfd of the init recorded in `m`, after checking it is still that
/// process (same start time).
expected<sys::unique_fd> open_init(const sandbox_meta& m, const std::string& id);

/// The node view of the root of a running sandbox, for recover(): taken
/// from init (pidfd_getfd of root_view_fd) or, for a sandbox of the old
/// layout, opened at <dir>/rootfs. Checked to be an overlayfs directory.
expected<sys::unique_fd> reopen_root(const sandbox_meta& m, int pidfd, const std::string& dir,
                                     const std::string& id);

} // namespace dsec::backends
