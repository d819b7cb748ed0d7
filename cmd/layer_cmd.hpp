// `dsec layer ...`: build a layer from a directory (optionally with its git
// history pruned), import an OCI layout or docker save archive, list the
// catalog, build the default layers. A thin shell over dsec::layers::store; it owns only
// argument parsing and output formatting.
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// Runs `dsec layer ARGS...` (`args` are the words after "layer"):
///   build DIR --name N --version V [--kind K] [--prune-git] [--state-dir DIR | --store DIR]
///   import OCI_LAYOUT_DIR|DOCKER_SAVE.tar --name N --version V [--kind K]
///          [--state-dir DIR | --store DIR]
///   ls [--state-dir DIR | --store DIR] [--json]
///   defaults [--state-dir DIR | --store DIR]
/// Flags take `--flag value` or `--flag=value`. Returns the exit code: 0 on
/// success, 1 when the operation failed (message on stderr), 2 on a usage error.
int run_layer_command(const std::vector<std::string>& args);

} // namespace dsec::cli
