// The `base/code-interpreter@1` default layer (issue 26 part 4): Debian's
// python3 with matplotlib and numpy, plus the stateful code interpreter's
// server (layers/code_interpreter/*.py, embedded into the binary at build
// time). Its layer config starts the server on 127.0.0.1:49999 when a
// sandbox starts; the server speaks the protocol of E2B's code interpreter
// (POST /execute streaming NDJSON, /contexts) so the unmodified
// `@e2b/code-interpreter` SDK works, and the Python SDK's run_code drives it
// through an exec of the client the layer ships (works on every backend,
// also with `network: none`).
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers {

constexpr const char* code_interpreter_ref = "base/code-interpreter@1";
/// debootstrap --include list: the interpreter's runtime from Debian.
constexpr const char* code_interpreter_packages = "python3,python3-matplotlib,python3-numpy";
/// Where the layer puts the server (and its modules) and the client.
constexpr const char* code_interpreter_dir = "/usr/lib/dsec/code_interpreter";
constexpr const char* code_interpreter_client = "/usr/lib/dsec/interp_client.py";
/// The port E2B's code interpreter listens on, inside the sandbox.
constexpr int code_interpreter_port = 49999;

/// One file the layer ships: its path inside the layer and its text.
struct embedded_file {
  std::string path;
  std::string text;
};

/// The interpreter's files (generated from layers/code_interpreter/*.py).
const std::vector<embedded_file>& code_interpreter_files();

/// The layer's exec defaults: the server as its start command.
layer_config code_interpreter_config();

/// Adds the interpreter to a Debian tree at `dir` (made with
/// code_interpreter_packages): writes the files, then warms matplotlib's font
/// cache in a chroot so a sandbox's first plot does not pay for it.
status add_code_interpreter(const std::string& dir);

} // namespace dsec::layers
