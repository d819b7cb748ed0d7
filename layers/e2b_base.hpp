// The `base/e2b@1` layer (issue 27, A1): what E2B's `base` template offers a
// command, from Debian bookworm packages. A user `user` (uid and gid 1000,
// home /home/user, bash), git, curl, wget, pip (Debian's python3-pip, with
// the system Python open to it as E2B's is) and `python` as well as
// `python3`. E2B's template name `base` maps to it (api/e2b_codec.cpp).
//
// Not here: sudo. A dsec sandbox runs every process with no_new_privs and
// no capabilities (backends/init/setup.cpp), so a setuid sudo could never
// raise a user to root. `base` stacks toolkit/e2b-sudo@1 on this layer
// instead: a sudo that asks dsec-init (layers/e2b_sudo.hpp).
//
// It takes a debootstrap of a few minutes, so `dsec layer defaults` builds
// it only when asked (`--e2b`); the test command asks.
#pragma once

#include <string>

#include "core/error.hpp"

namespace dsec::layers {

constexpr const char* e2b_base_name = "base/e2b";
constexpr const char* e2b_base_version = "1";
constexpr const char* e2b_base_ref = "base/e2b@1";
/// debootstrap --include list.
constexpr const char* e2b_base_packages =
  "python3,python3-pip,python-is-python3,git,curl,wget,ca-certificates,procps";
/// E2B's user: its name, ids and home.
constexpr const char* e2b_user = "user";
constexpr int e2b_uid = 1000;
constexpr const char* e2b_home = "/home/user";

/// Makes a Debian tree at `dir` (debootstrapped with e2b_base_packages) into
/// E2B's base: adds the user with its home (useradd in a chroot, skeleton
/// files included), hands /work to it, and drops pip's EXTERNALLY-MANAGED
/// marker so `pip install` works as in E2B's template. Blocking.
status add_e2b_base(const std::string& dir);

} // namespace dsec::layers
