// `dsec node …`: parse the node's flags (DESIGN.md §4) and run it.
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// Runs `dsec node ARGS...`; returns the exit code.
int run_node_command(const std::vector<std::string>& args);

} // namespace dsec::cli
