// Exec defaults that layers carry (layer_config in core/types.hpp): how the
// configs of a sandbox's layers combine into the one its execs start from,
// and the grammar of a user given by name or number. Pure functions; the
// sandbox actor applies the result, the sandbox's init resolves the user.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec {

/// The configs of a stack of layers, bottom first, as one: for workdir and
/// user the topmost layer that sets the field wins; env maps merge key by
/// key, an upper layer's value replacing a lower one's.
/// The start command, like workdir, comes from the topmost layer that sets it.
layer_config merge_layer_configs(const std::vector<layer_config>& bottom_first);

/// `base` with `over`'s entries on top (a spec's env over its layers' env).
std::map<std::string, std::string> overlay_env(std::map<std::string, std::string> base,
                                               const std::map<std::string, std::string>& over);

/// Checks a user: "name", "uid", "name:group" or "uid:gid" (names as in
/// /etc/passwd: letters, digits, '_', '-', '.', at most 64 bytes, not
/// starting with '-'; numbers below 2^32-1). `what` names the field in the
/// error ("exec user", "USER").
status validate_user(const std::string& user, const std::string& what);

/// Checks a layer_config before it is recorded: env names non-empty without
/// '=' or NUL, workdir absolute, user as validate_user.
status validate_layer_config(const layer_config& c);

} // namespace dsec
