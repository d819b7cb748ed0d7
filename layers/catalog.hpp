// The store catalog file: a JSON map from `name@version` to the layer it
// names, plus the flock that serialises writers across threads and processes.
// Internal to the store; the on-disk form is
//   {"version":1,"layers":{"base/busybox@1":{"kind":"base","digest":"sha256:..",
//    "size_bytes":123,"created_at_ms":1700000000000,
//    "config":{"env":{"K":"V"},"workdir":"/w","user":"app"}}}}
// where "config" (exec defaults) and each of its fields appear only when set.
// A missing file is an empty catalog. A file that does not parse, or an entry
// with a missing or mistyped field, is an error naming the file and the entry:
// the store refuses to guess rather than overwrite layers it cannot read.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"
#include "sys/fd.hpp"

namespace dsec::layers::catalog {

/// Layers by ref.
using entries = std::map<std::string, layer_info>;

/// Parses catalog text; `path` only names the file in errors.
expected<entries> parse(std::string_view text, const std::string& path);

/// The JSON text of `e` (stable: keys sorted, so equal catalogs are equal bytes).
std::string serialize(const entries& e);

/// Reads and parses the catalog at `path`; a missing file is empty.
expected<entries> load(const std::string& path);

/// Writes the catalog atomically (temp, fsync, rename) and fsyncs its directory.
status save(const std::string& path, const entries& e);

/// fsyncs a directory so a rename into it survives a crash.
status sync_dir(const std::string& dir);

/// An exclusive flock(2) on a lock file, released on destruction. flock locks
/// belong to the open file description, so two threads of one process exclude
/// each other as two processes do.
class lock {
 public:
  /// Blocks until the lock on `path` (created if missing) is held.
  static expected<lock> acquire(const std::string& path);

 private:
  explicit lock(sys::unique_fd fd) : fd_(std::move(fd)) {}
  sys::unique_fd fd_;
};

} // namespace dsec::layers::catalog
