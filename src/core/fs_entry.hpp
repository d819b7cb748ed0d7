// Filesystem entries of a sandbox as the node's file API sees them (stat, list
// a directory, make a directory, move, remove): what the E2B envd filesystem
// service answers. Plain structs; the inspect() overload is in
// core/fs_entry_inspect.hpp, registered in actors/wire_types.cpp. Append only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsec {

/// One file, directory or symlink inside a sandbox (never followed).
struct fs_entry {
  /// Last path component ("" for the root).
  std::string name;
  /// Absolute path inside the sandbox.
  std::string path;
  /// "file" | "dir" | "symlink" | "other" (device, FIFO, socket).
  std::string type;
  int64_t size = 0;
  /// st_mode (type and permission bits).
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  /// Modification time, Unix nanoseconds.
  int64_t mtime_ns = 0;
  /// Where a symlink points, as stored (not resolved); empty otherwise.
  std::string symlink_target;
};

/// Operations of sandbox::file_op. Wire values (sent as strings): append only.
namespace fs_ops {
constexpr const char* stat = "stat";     ///< one entry for `path`
constexpr const char* list = "list";     ///< entries below `path`, `depth` levels
constexpr const char* mkdir = "mkdir";   ///< makes `path` and its parents; conflict if it exists
constexpr const char* move = "move";     ///< renames `path` to `to`; answers the new entry
constexpr const char* remove = "remove"; ///< removes `path` and everything below it
} // namespace fs_ops

/// Most entries one list answers (bounds the answer's size); too_large beyond.
constexpr size_t max_list_entries = 100000;

} // namespace dsec
