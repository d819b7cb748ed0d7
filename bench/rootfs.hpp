// The busybox root filesystem that the peer runtimes (crun, bwrap) run from:
// bin/busybox (static, from the host's busybox-static) with one relative
// symlink per applet, and the few directories and files a shell expects.
#pragma once

#include <string>

#include "core/error.hpp"

namespace dsec::bench {

/// Builds the rootfs in `dir` (created if missing) from the host's busybox.
/// Fails naming the step if busybox is missing or a file cannot be written.
status build_busybox_rootfs(const std::string& dir);

} // namespace dsec::bench
