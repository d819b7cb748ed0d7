// A layer's start command (layer_config::start): the server a layer ships,
// e.g. the code interpreter on port 49999, started in the background when
// the sandbox starts, as a Dockerfile's CMD would be. It runs through the
// backend's exec path like any command (so on the container and the microVM
// backend alike) and dies with the sandbox.
//
// Readiness: the create is answered once the command printed its first
// output (a server prints a line when it listens) or exited, or after
// `start_ready_wait`, so a client's first request after create finds it up,
// as E2B's templates (started before they are snapshotted) do.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/types.hpp"

namespace dsec {

constexpr std::chrono::seconds start_ready_wait{30};

/// Starts `defaults.start` (nothing if empty) in `sb` with the layers'
/// workdir and user, and waits (blocking: call it on a worker) until it is
/// ready as above. Its output past readiness is dropped; a start command
/// that exits is logged with its status.
void run_layer_start(const std::shared_ptr<backends::sandbox>& sb, const layer_config& defaults,
                     const std::string& node, const std::string& id);

} // namespace dsec
