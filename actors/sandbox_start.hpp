// A layer's start command (layer_config::start): the server a layer ships,
// e.g. the code interpreter on port 49999, started in the background when
// the sandbox starts, as a Dockerfile's CMD would be. It runs through the
// backend's exec path like any command (so on the container and the microVM
// backend alike) and dies with the sandbox; nobody waits for it.
#pragma once

#include <string>
#include <vector>

#include "actors/sandbox.hpp"

namespace dsec {

/// Starts `argv` (nothing if empty) in the sandbox of `st`, with the
/// layers' workdir and user; its output is dropped (a server logs to its own
/// files). A start command that exits is logged with its status.
void run_layer_start(sandbox_actor_state& st, const std::vector<std::string>& argv);

} // namespace dsec
