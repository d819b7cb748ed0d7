// `dsec trajectory ID [--since SEQ] [--json]` and `dsec replay ID
// [--upto-seq SEQ]`: a sandbox's trajectory log and a rebuild from it, over
// the node's REST gateway (--rest HOST:PORT, or $DSEC_REST).
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// True for "trajectory" and "replay".
bool is_trajectory_command(const std::string& cmd);

/// Runs one of them; the exit code (0, 1 on a node error, 2 on usage).
int run_trajectory_command(const std::string& cmd, const std::vector<std::string>& args);

} // namespace dsec::cli
