// `dsec lazyfs …`: the lazy blob daemon (lazyfs/daemon.hpp). The node starts
// it detached; an operator may run it in the foreground or stop it.
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// Runs `dsec lazyfs ARGS...`; returns the exit code.
int run_lazyfs_command(const std::vector<std::string>& args);

} // namespace dsec::cli
