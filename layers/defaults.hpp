// The default layers every dsec cluster starts with: `base/busybox@1`, a tiny
// root file system made from the host's busybox-static, and `base/python@3.11`,
// a Debian bookworm minbase with python3 made by debootstrap (1-2 minutes and
// ~260 MB before trimming; needs root and network access to a Debian mirror).
// `base/code-interpreter@1` is the same with matplotlib and numpy, plus the
// stateful code interpreter's server that its layer config starts on port
// 49999 (layers/code_interpreter.hpp).
// Layers already in the catalog are skipped, so `dsec layer defaults` is
// cheap to run on every node start.
#pragma once

#include <functional>
#include <string>

#include "core/error.hpp"
#include "layers/store.hpp"

namespace dsec::layers {

/// Progress lines ("layer defaults: base/busybox@1: built sha256:.. in 0.1 s").
using log_fn = std::function<void(const std::string&)>;

/// Builds the default layers missing from `s`, logging progress and the time
/// each took. Stops at the first failure and returns it, naming the layer.
status build_defaults(store& s, log_fn log);

/// Fills `dir` (an existing empty directory) with a busybox root file system:
/// bin/busybox copied from `busybox`, one relative symlink per applet from
/// `busybox --list-full`, /etc/passwd and /etc/group (root, nobody), empty
/// /tmp (1777), /root, /proc, /sys, /dev and /work. No /etc/hostname.
status make_busybox_rootfs(const std::string& busybox, const std::string& dir);

/// The Debian mirror for bookworm from apt sources: the first `URIs:` of a
/// deb822 stanza (`sources_d`, the concatenated *.sources files) whose Suites
/// name bookworm, else the first `deb URI bookworm ...` line of `sources_list`,
/// else http://deb.debian.org/debian. Pure, for tests.
std::string pick_debian_mirror(const std::string& sources_d, const std::string& sources_list);

/// pick_debian_mirror over this machine's /etc/apt/sources.list.d/*.sources
/// and /etc/apt/sources.list.
std::string find_debian_mirror();

/// Builds `base/e2b@1` (layers/e2b_base.hpp) unless `s` has it: a bookworm
/// debootstrap of a few minutes, so only when asked (`dsec layer defaults
/// --e2b`). Logs like build_defaults.
status build_e2b_base(store& s, log_fn log);

} // namespace dsec::layers
