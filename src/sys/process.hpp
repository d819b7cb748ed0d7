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

/// Runs argv[0] (PATH lookup) with argv, waits for it. Blocking: call it from
/// a worker thread, never from an actor. Fails only if it cannot start.
expected<command_result> run_command(const std::vector<std::string>& argv);

} // namespace dsec::sys
