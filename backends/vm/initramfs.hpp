// The guest initramfs of the microvm and vm backends: a newc cpio archive
// holding dsec-init as /init, the kernel modules it loads as /modules/*.ko,
// the directories it mounts on and a /dev/console node. Written by the node
// once at start (so the guest always runs the init of this build), never
// with the host's cpio tools.
#pragma once

#include <string>

#include "core/error.hpp"

namespace dsec::backends {

/// Writes the archive to `out` (atomically: a temporary file renamed):
/// `init_path` as /init and every *.ko of `modules_dir` below /modules.
status write_guest_initramfs(const std::string& out, const std::string& init_path,
                             const std::string& modules_dir);

} // namespace dsec::backends
