// sandbox_path: what a file call into a sandbox answers the same way
// whichever end resolves the path: the error code an errno maps to. The
// shape of the path is the one grammar of core/sandbox_path.hpp
// (parse_sandbox_path), included here for the backends. The container
// backend resolves paths itself, in-root on the host (container/files.cpp);
// the VM backends send them to the guest's init over its file port and map
// the errno it answers. Pure functions.
#pragma once

#include "core/error.hpp"
#include "core/sandbox_path.hpp"

namespace dsec::backends {

/// The error code a file call answers for `err` (errno): not_found,
/// invalid_argument for paths that are not plain files or leave the root,
/// conflict for a running binary, too_large, resource_exhausted for a full
/// quota, internal otherwise.
errc file_errc(int err);

} // namespace dsec::backends
