// Running host helper programs (mkfs.erofs, debootstrap) with captured output.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::sys {

/// What a finished command left.
struct command_result {
  int exit_code = 0;
  std::string output; // stdout and stderr interleaved, capped at 1 MiB
};

/// Runs argv[0] (PATH lookup) with argv, waits for it. `input` is fed to its
/// stdin (a few KiB at most: written before the output is read), /dev/null
/// when empty. Blocking: call it from a worker thread, never from an actor.
/// Fails only if it cannot start.
expected<command_result> run_command(const std::vector<std::string>& argv,
                                     const std::string& input = {});

/// run_command for commands whose success is all that matters: an error
/// naming the command line and its output (or exit status) unless it exits 0.
status run_checked(const std::vector<std::string>& argv, const std::string& input = {});

} // namespace dsec::sys
