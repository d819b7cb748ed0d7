// E2B's user on a layer that lacks it (issue 27): `toolkit/code-interpreter-user@1`
// adds the account `user` (uid and gid 1000, home /home/user with the
// lower layer's /etc/skel, bash) on top of `base/code-interpreter@1`, whose
// content stays as it is, so E2B calls on the code-interpreter template run
// as `user` in /home/user as E2B's do (api/e2b_user.hpp picks the user from
// the sandbox's /etc/passwd). A layer stacked on another replaces whole
// files, so it carries the lower layer's /etc/passwd, group, shadow and
// gshadow with the user's lines appended: it fits that one lower layer
// (by digest at build time) and is named after it.
#pragma once

#include <string>

#include "core/error.hpp"
#include "layers/defaults.hpp"
#include "layers/store.hpp"

namespace dsec::layers {

constexpr const char* code_interpreter_user_name = "toolkit/code-interpreter-user";
constexpr const char* code_interpreter_user_version = "1";
constexpr const char* code_interpreter_user_ref = "toolkit/code-interpreter-user@1";

/// Appends E2B's user to the account files of the tree mounted at `lower`,
/// writing them and /home/user into `dir`. Refuses a lower tree that already
/// has the name or uid 1000. Blocking.
status add_user_over(const std::string& lower, const std::string& dir);

/// Builds `toolkit/code-interpreter-user@1` over `base/code-interpreter@1`
/// (which `s` must hold) unless `s` has it: mounts the lower image read-only
/// in a staging directory, reads its account files, unmounts. Blocking.
status build_code_interpreter_user(store& s, log_fn log);

} // namespace dsec::layers
