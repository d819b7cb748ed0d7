// The peer runtimes that dsec is compared with on the same busybox rootfs:
// crun (an OCI runtime; run inside a patched mount namespace, see spawn.hpp)
// and bubblewrap (no exec into a running sandbox).
#pragma once

#include <memory>
#include <string>

#include "bench/target.hpp"

namespace dsec::bench {

/// Prepares crun: two OCI bundles in `workdir` (made with `crun spec`, edited
/// to use `rootfs`) and the patched mount namespace. Fails if crun is missing
/// or a probe container does not run.
expected<std::unique_ptr<bench_target>> make_crun_target(const std::string& workdir,
                                                         const std::string& rootfs);

/// Prepares bwrap over `rootfs`. Fails if bwrap is missing or a probe fails.
expected<std::unique_ptr<bench_target>> make_bwrap_target(const std::string& rootfs);

} // namespace dsec::bench
