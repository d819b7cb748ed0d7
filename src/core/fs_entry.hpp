// Filesystem entries of a sandbox as the node's file API sees them (stat, list
// a directory, make a directory, move, remove): what the E2B envd filesystem
// service answers. Plain structs; the inspect() overload is in
// core/fs_entry_inspect.hpp, registered in actors/wire_types.cpp. Append only.
#pragma once

#include <cstdint>
#include <map>
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
  /// E2B's file metadata (envd 0.6.2): the file's `user.e2b.<key>` extended
  /// attributes, keyed without the prefix; empty for symlinks and others.
  std::map<std::string, std::string> metadata;
};

/// Operations of sandbox::file_op. Wire values (sent as strings): append only.
namespace fs_ops {
constexpr const char* stat = "stat";     ///< one entry for `path`
constexpr const char* list = "list";     ///< entries below `path`, `depth` levels
constexpr const char* mkdir = "mkdir";   ///< makes `path` and its parents; conflict if it exists
constexpr const char* move = "move";     ///< renames `path` to `to`; answers the new entry
constexpr const char* remove = "remove"; ///< removes `path` and everything below it
/// Replaces the `user.e2b.*` metadata of file `path` with `to`'s lines
/// (metadata_lines) and answers its entry; E2B's upload with X-Metadata-*.
constexpr const char* set_metadata = "setmeta";
} // namespace fs_ops

/// Most entries one list answers (bounds the answer's size); too_large beyond.
constexpr size_t max_list_entries = 100000;

/// The extended-attribute namespace of E2B's file metadata.
constexpr const char* metadata_xattr_prefix = "user.e2b.";

/// Metadata as set_metadata's `to`: one `key=value` line each. Unambiguous
/// for what E2B allows (keys are HTTP tokens, without '='; values printable
/// ASCII, without a newline).
inline std::string metadata_lines(const std::map<std::string, std::string>& m) {
  std::string out;
  for (auto& [k, v] : m)
    out.append(k).append(1, '=').append(v).append(1, '\n');
  return out;
}

/// The map of metadata_lines' text; a line without '=' is skipped.
inline std::map<std::string, std::string> parse_metadata_lines(const std::string& text) {
  std::map<std::string, std::string> m;
  size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos)
      nl = text.size();
    auto eq = text.find('=', pos);
    if (eq != std::string::npos && eq < nl && eq > pos)
      m[text.substr(pos, eq - pos)] = text.substr(eq + 1, nl - eq - 1);
    pos = nl + 1;
  }
  return m;
}

} // namespace dsec
