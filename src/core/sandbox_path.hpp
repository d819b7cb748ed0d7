// The one grammar of paths inside a sandbox, whoever reads them: the REST
// and E2B file routes, the spec's protected paths, an exec's cwd, an
// fncall's files, and the backends that resolve them (a container's files
// in-root on the host, a guest's through its init). One function decides;
// each caller names the form it takes (a file, a directory that may be the
// root, a path compared as written, a path relative to a call's directory)
// and wraps the refusal in its own operation. Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec {

/// The form of path a caller takes.
enum class path_form : uint8_t {
  /// A file or directory to act on: absolute, not the root itself.
  entry,
  /// As entry, or the root itself ("/"): a directory to list, a cwd.
  entry_or_root,
  /// As entry_or_root, and written normalised: no empty or "." component
  /// and no trailing '/' (protected paths, compared as written).
  normalised,
  /// Relative to a call's own directory (an fncall's files): not absolute,
  /// not empty.
  relative,
};

/// Longest path accepted, bytes (the kernel's PATH_MAX).
inline constexpr size_t max_sandbox_path = 4096;

/// Checks `path` against the grammar and returns its components ("/" has
/// none). Every form: at most max_sandbox_path bytes, no NUL, no ".."
/// component (a path never climbs out of where it starts, whatever resolves
/// it). Absolute unless `form` is relative; empty and "." components are
/// dropped, except in a normalised path, which refuses them. The refusal is
/// an invalid_argument naming the path and the rule: `path "a/b": must be
/// absolute`.
expected<std::vector<std::string>> parse_sandbox_path(std::string_view path, path_form form);

} // namespace dsec
