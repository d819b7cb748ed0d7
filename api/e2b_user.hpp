// Who an E2B envd call acts as, and where its relative paths start (issue 27,
// A1). E2B runs commands and resolves relative paths as user `user` in
// /home/user unless a call names another user (the SDK's `user` option:
// `Authorization: Basic base64("name:")` on a Connect RPC, `username=` on
// GET/POST /files). dsec does the same on E2B calls only, when the sandbox
// has that user in its own /etc/passwd; a sandbox without one (busybox,
// base/python) keeps its own default user and `/`, as before. Native dsec
// calls never come here.
// Pure (no CAF), for unit tests.
#pragma once

#include <string>
#include <string_view>

#include "api/e2b_codec.hpp"
#include "core/error.hpp"

namespace dsec::e2b {

/// E2B's default user (defaultUsername in its SDKs).
constexpr const char* default_user = "user";

/// Who a call runs as.
struct envd_identity {
  /// The exec user (a name from the sandbox's passwd); empty: the sandbox's
  /// own default, as a native call.
  std::string user;
  /// Where relative paths and a command without cwd start.
  std::string home = "/";
  /// The passwd entry's ids (0 for the sandbox default).
  uint32_t uid = 0;
  uint32_t gid = 0;
  /// The sandbox's /etc/passwd as read for this call (names of owners).
  std::string passwd;
};

/// Names by id from /etc/passwd and /etc/group text (name:x:id:...): the
/// first name of an id wins, malformed lines are skipped.
owner_names owner_names_of(std::string_view passwd, std::string_view group);

/// The user an `Authorization: Basic` header names (base64 of "name:" with
/// an empty password); empty when the header is absent or not Basic (a
/// Bearer key is the control plane's). A Basic header that does not decode
/// is invalid_argument.
[[nodiscard]] expected<std::string> basic_auth_user(std::string_view authorization);

/// The identity of a call that asked for `asked` (empty: E2B's default) in a
/// sandbox whose /etc/passwd is `passwd` (empty if it has none). The default
/// user missing falls back to the sandbox's default; a named user missing is
/// invalid_argument naming it.
[[nodiscard]] expected<envd_identity> identity_of(std::string_view passwd, std::string_view asked);

} // namespace dsec::e2b
