// `dsec layer build --dockerfile PATH ...`: a layer built from a Dockerfile
// (layers/dockerfile.hpp) by a running node. Each RUN runs in a real dsec
// sandbox over the base layer and the steps so far and becomes a layer
// through the node's snapshot (the sandbox's upper, packed as is); each
// COPY/ADD unpacks a tar of the context's files inside such a sandbox, so
// modes are kept and existing directories are left as they are. Steps are
// cached in the store as `build/<key>@1`, the key hashing the parent's key,
// the instruction after substitution, the ENV/WORKDIR/USER/ARG state it ran
// with and, for COPY/ADD, the digest of the copied content: a rebuild with an
// unchanged prefix says CACHED for it. The result N@V is one layer (the
// stack flattened: overlay of the step layers, mounted by this command in a
// private mount namespace, packed with mkfs.erofs), usable alone in a spec,
// with ENV, WORKDIR and USER as its exec defaults.
//
// The command talks to the node over REST (--rest, $DSEC_REST, 127.0.0.1:7070)
// and reads and writes the node's layer store directly (--store or
// --state-dir as for `dsec layer build DIR`): the node must be local to it.
#pragma once

#include <string>
#include <vector>

namespace dsec::cli {

/// True when `words` (after "layer") are a `build --dockerfile` command.
bool is_dockerfile_build(const std::vector<std::string>& words);

/// Runs it; returns the exit code (0 built, 1 failed, 2 usage).
int run_dockerfile_build(const std::vector<std::string>& words);

} // namespace dsec::cli
