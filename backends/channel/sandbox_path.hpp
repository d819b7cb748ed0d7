// sandbox_path: what a file call into a sandbox must check and answer the
// same way whichever end resolves the path: the shape of the path (absolute,
// no "..", not the root) and the error code an errno maps to. The container
// backend resolves paths itself, in-root on the host (container/files.cpp);
// the VM backends send them to the guest's init over its file port and map
// the errno it answers. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::backends {

/// The error code a file call answers for `err` (errno): not_found,
/// invalid_argument for paths that are not plain files or leave the root,
/// conflict for a running binary, too_large, resource_exhausted for a full
/// quota, internal otherwise.
errc file_errc(int err);

/// Splits an absolute sandbox path into its components; refuses relative
/// paths, "..", NUL bytes and the root itself (invalid_argument naming it).
expected<std::vector<std::string>> split_sandbox_path(const std::string& path);

} // namespace dsec::backends
