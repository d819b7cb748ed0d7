// Applying one image layer (a tar, plain or gzip/zstd/xz compressed) to a
// directory, the way a container runtime stacks OCI layers: entries are
// created, replaced or merged in archive order, and OCI whiteouts delete what
// lower layers put there (`.wh.NAME` removes NAME, `.wh..wh..opq` empties its
// directory of everything earlier layers gave it).
//
// A layer is untrusted input. Every path is resolved with openat2(2)
// RESOLVE_IN_ROOT against the root directory's fd, so `..`, absolute paths,
// absolute or relative symlinks planted by earlier entries and hardlink
// targets all stay inside the root: the kernel treats the root as "/" for
// every lookup, as the sandbox later will. Entries whose name contains a `..`
// component are refused outright (no legitimate layer has them). Only the
// final component is ever created, and with *at() calls on the resolved
// parent's fd, which never follow a symlink there.
//
// Reading uses libarchive (every tar dialect and compression); writing is our
// own, because libarchive's disk writer works relative to the process's cwd
// (not thread-safe) and refuses rather than confines paths through symlinks.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::layers {

/// What applying layers did, summed over calls.
struct apply_stats {
  int64_t entries = 0;       ///< files, dirs, links created or updated
  int64_t bytes = 0;         ///< regular file data written
  int64_t whiteouts = 0;     ///< `.wh.NAME` entries applied
  int64_t opaque_dirs = 0;   ///< `.wh..wh..opq` entries applied
  int64_t hardlinks = 0;     ///< hardlinks created
  int64_t skipped_devices = 0; ///< char/block device nodes left out (see tar_apply.cpp)
};

/// How to treat an archive.
struct apply_options {
  /// Interpret `.wh.` names as OCI whiteouts (image layers). Off for plain
  /// archives such as a `docker save` tarball, whose members are files.
  bool whiteouts = true;
  /// Keep uid/gid from the archive (needs root); off writes as the caller.
  bool keep_owner = true;
};

/// Applies the archive at `archive_path` on top of the directory `root_dir`
/// (which must exist). `what` names the archive in errors ("layer 2 (blobs/
/// sha256/ab..)"). Fails with invalid_argument for an archive that is not a
/// tar or names a path with `..` or is otherwise malformed, internal for
/// host errors; the root is then left half-applied (callers stage it in a
/// temp directory and delete it).
status apply_tar(const std::string& archive_path, const std::string& root_dir,
                 const std::string& what, apply_stats& stats,
                 const apply_options& opts = {});

} // namespace dsec::layers
