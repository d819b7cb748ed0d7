// `dsec pty`: the local terminal attached to a terminal in a sandbox
// (cmd/pty_cmd.cpp).
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// True for "pty".
bool is_pty_command(const std::string& cmd);
/// Runs `dsec pty ...`; the terminal's exit status, 1 on errors, 2 on usage.
int run_pty_command(const std::string& cmd, const std::vector<std::string>& args);

} // namespace dsec::cli
