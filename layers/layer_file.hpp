// One new file of a layer being built (the E2B user and sudo layers): made
// exclusively, written whole, then given its owner and exact mode (fchmod
// after the umask; the owner first, since a chown clears setuid bits).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::layers {

/// Creates `path` (it must not exist) with `data` and exactly `mode`; with
/// `uid`/`gid` other than -1, owned by them.
status create_layer_file(const std::string& path, std::string_view data, mode_t mode,
                         uid_t uid = uid_t(-1), gid_t gid = gid_t(-1));

} // namespace dsec::layers
