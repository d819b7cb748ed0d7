// Filesystem operations inside a container sandbox's root (stat, list,
// mkdir, move, remove; core/fs_entry.hpp), resolved like files.cpp so nothing
// an agent plants leads the node outside the sandbox root.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fs_entry.hpp"

namespace dsec::backends {

/// Runs `op` (an fs_ops name) on `path` (absolute, inside the sandbox; "/" is
/// the root) against `root`, an O_PATH fd of the sandbox root. `to` is the
/// destination of a move, `depth` the levels a list descends (1 = the
/// directory's own entries). Blocking.
expected<std::vector<fs_entry>> file_op_in_root(int root, const std::string& op,
                                                const std::string& path, const std::string& to,
                                                int32_t depth);

} // namespace dsec::backends
