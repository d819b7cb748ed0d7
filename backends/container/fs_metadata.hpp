// E2B's file metadata (envd 0.6.2) inside a container sandbox: the
// `user.e2b.*` extended attributes of a file or directory (fs_metadata.cpp).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "core/fs_entry.hpp"

namespace dsec::backends {

/// The `user.e2b.*` attributes of the inode `fd` (an O_PATH fd is enough),
/// keyed without the prefix; empty when there are none or the filesystem
/// keeps none. Blocking.
std::map<std::string, std::string> read_metadata(int fd);

/// The same for entry `name` of directory `dir` ("" = `dir` itself), whose
/// st_mode is `mode`: only files and directories carry metadata.
std::map<std::string, std::string> read_metadata_at(int dir, const std::string& name,
                                                    mode_t mode);

/// Replaces every `user.e2b.*` attribute of the inode `fd` with `metadata`
/// (`path` names it in errors). Blocking.
status replace_metadata(int fd, const std::string& path,
                        const std::map<std::string, std::string>& metadata);

} // namespace dsec::backends
