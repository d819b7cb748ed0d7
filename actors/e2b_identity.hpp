// Who an E2B envd call acts as, on the node (issue 27, A1; the pure rules
// are api/e2b_user.hpp). Each call reads the sandbox's /etc/passwd through
// the front door (a small read; a user added inside a running sandbox
// counts at once), so commands run, and relative paths resolve, as E2B's
// `user` in /home/user, or as the user the call names.
//
// Files written through the API belong to that user, as in E2B: before the
// node writes a file (as root, from outside, any size), the user makes its
// missing parent directories and the empty file with one small command, so
// the write keeps the user as owner. Where the user may not create it
// (outside its own directories) the file is root's, as a native write.
#pragma once

#include <functional>
#include <string>

#include "actors/e2b_gateway.hpp"
#include "api/e2b_user.hpp"

namespace dsec::e2b {

/// Resolves the identity of a call to sandbox `id` asking for `asked` (empty:
/// E2B's default) and calls `then`, or `fail` with the error (a paused
/// sandbox's refusal included, for the caller's usual answer).
void with_identity(const gateway_ref& g, const std::string& id, const std::string& asked,
                   std::function<void(envd_identity)> then,
                   std::function<void(const error&)> fail);

/// The user a call names: `Authorization: Basic` on a Connect RPC, else
/// `username=` of GET/POST /files (`query_user`).
[[nodiscard]] expected<std::string> asked_user(const http_call& c, const std::string& query_user);

/// The sandbox's user and group names (its /etc/passwd as read for `who`,
/// and its /etc/group, read now; none if it has none), for the owners of
/// filesystem entries.
void with_owner_names(const gateway_ref& g, const std::string& id, const envd_identity& who,
                      std::function<void(owner_names)> then);

/// As `who` (unless it is the sandbox default or root): makes the missing
/// parents of `path` and `path` itself as an empty file if it is missing,
/// so a following write keeps `who` as its owner. `then` runs whatever
/// came of it (the write reports its own errors).
void prepare_owned_file(const gateway_ref& g, const std::string& id, const envd_identity& who,
                        const std::string& path, std::function<void()> then);

/// MakeDir as `who`: makes `path` and its missing parents as the user;
/// then(true) if it made `path`, then(false) otherwise (it existed, or the
/// user may not make it: the caller's own MakeDir answers that).
void make_dir_as(const gateway_ref& g, const std::string& id, const envd_identity& who,
                 const std::string& path, std::function<void(bool)> then);

} // namespace dsec::e2b
