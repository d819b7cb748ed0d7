// Small filesystem helpers with errors that name operation, path and errno.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <sys/types.h>

#include "core/error.hpp"

namespace dsec::sys {

/// mkdir -p; existing directories are fine.
status make_dirs(const std::string& path, mode_t mode = 0755);

/// Reads a whole file.
expected<std::string> read_file(const std::string& path);

/// Whether write_file_atomic survives a host crash (fsync) or only a process
/// crash (rename alone).
enum class durability { host_crash, process_crash };

/// Writes `data` to a temp file beside `path`, fsyncs it (unless
/// process_crash is enough) and renames it over `path`: readers see the old or
/// the new content, never a torn one.
status write_file_atomic(const std::string& path, std::string_view data,
                         mode_t mode = 0644, durability d = durability::host_crash);

/// pread / pwrite of all `len` bytes at `offset`, over short transfers and
/// EINTR. False with errno set on an error; a read that meets the end of
/// the file first sets EIO.
bool pread_all(int fd, char* out, size_t len, uint64_t offset);
bool pwrite_all(int fd, const char* data, size_t len, uint64_t offset);

/// Writes `data` to an existing file (e.g. a cgroup knob) without truncation
/// semantics beyond O_TRUNC.
status write_text(const std::string& path, std::string_view data);

/// rm -rf that never crosses a mount point (a mount below `path` makes it
/// fail with EBUSY rather than delete another filesystem's files).
status remove_tree(const std::string& path);

/// A directory tree removed (remove_tree) when the guard goes out of scope,
/// unless `path` is empty: staging dirs that must not outlive a failure.
struct scoped_tree {
  std::string path;
  scoped_tree() = default;
  scoped_tree(const scoped_tree&) = delete;
  scoped_tree& operator=(const scoped_tree&) = delete;
  ~scoped_tree() {
    if (!path.empty())
      (void)remove_tree(path);
  }
};

/// One line of /proc/self/mountinfo.
struct mount_entry {
  /// Where it is mounted, with mountinfo's \ooo escapes decoded.
  std::string point;
  std::string fstype;
  /// What is mounted there (a device such as /dev/loop0, or "none").
  std::string source;
};

/// Every mount of this process's mount namespace, in mount order.
std::vector<mount_entry> mounts();

/// Lazily unmounts every mount below `dir` (deepest first), e.g. the /proc
/// that debootstrap mounts into a tree it was building when it was killed.
void unmount_below(const std::string& dir);

/// True if `dir` has no entries (besides . and ..) or does not exist;
/// a lost+found left by mkfs does not count.
bool dir_is_empty(const std::string& dir);

/// True if `path` exists (lstat).
bool exists(const std::string& path);

/// True if `path` is a mount point (its st_dev differs from its parent's, or
/// it appears in /proc/self/mountinfo).
bool is_mount_point(const std::string& path);

/// openat2(root, rel, flags | O_CLOEXEC, mode) with RESOLVE_IN_ROOT and
/// RESOLVE_NO_MAGICLINKS (plus `extra_resolve`, e.g. RESOLVE_NO_XDEV): `..`
/// stops at `root` and symlinks resolve as if `root` were "/", so nothing
/// inside can lead the caller out. `rel` "" opens the root itself. Retries
/// the kernel's EAGAIN (a concurrent rename). Returns the fd or -1 (errno).
int open_in_root(int root, const std::string& rel, int flags, mode_t mode = 0,
                 uint64_t extra_resolve = 0);

} // namespace dsec::sys
