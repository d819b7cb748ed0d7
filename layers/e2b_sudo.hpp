// The `toolkit/e2b-sudo@1` layer (issue 27): passwordless `sudo` for E2B's
// user, stacked on `base/e2b@1` (whose content it leaves as it is). Two
// files: /usr/bin/sudo, the static dsec-sudo client of dsec-init
// (backends/init/sudo_proto.hpp says why not the setuid sudo), and
// /etc/dsec/sudo-users naming `user`, the policy init reads. E2B's template
// name `base` maps to both layers (api/e2b_codec.cpp), and the code
// interpreter's templates stack it too. Built by `dsec layer defaults`
// (seconds: no debootstrap).
#pragma once

#include <string>

#include "core/error.hpp"
#include "layers/defaults.hpp"
#include "layers/store.hpp"

namespace dsec::layers {

constexpr const char* e2b_sudo_name = "toolkit/e2b-sudo";
constexpr const char* e2b_sudo_version = "1";
constexpr const char* e2b_sudo_ref = "toolkit/e2b-sudo@1";

/// Fills `dir` with the layer's files: `sudo_binary` (the dsec-sudo built
/// beside dsec) as usr/bin/sudo, and etc/dsec/sudo-users naming E2B's user.
status add_e2b_sudo(const std::string& dir, const std::string& sudo_binary);

/// Builds `toolkit/e2b-sudo@1` into `s` unless it has it. Blocking.
status build_e2b_sudo(store& s, const std::string& sudo_binary, log_fn log);

} // namespace dsec::layers
