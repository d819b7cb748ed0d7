// Where a lazily read data blob comes from, and how the store points at it.
// A chunked layer whose data blob stays in a registry is registered here: a
// small JSON file per blob under <store>/lazy/sources/, and in blobs/ a
// relative symlink `sha256-<hex>.blob -> ../lazy/mnt/sha256-<hex>.blob`,
// the file the lazy blob daemon (lazyfs/) serves over FUSE. The mount cache
// mounts the image with `-o device=<blobs/...blob>` as for any chunked layer;
// the kernel follows the link and reads through the daemon, which fetches
// chunks by range requests and keeps them in its bounded cache.
//
//   <store>/lazy/sources/sha256-<hex>.json   {"registry","repository","digest","size","chunk_size"}
//   <store>/lazy/mnt/                         the FUSE mount (one per node)
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::registry {

struct blob_source {
  /// "host[:port]" of the registry (mirrors apply as for pulls).
  std::string registry;
  std::string repository;
  /// "sha256:<hex>" of the whole blob.
  std::string digest;
  uint64_t size = 0;
  /// The read unit of range requests: the layer's EROFS chunk size.
  uint32_t chunk_size = 256u << 10;
};

/// <store_root>/lazy/sources, <store_root>/lazy/mnt.
std::string lazy_sources_dir(const std::string& store_root);
std::string lazy_mount_dir(const std::string& store_root);

/// Writes `src`'s JSON (atomically) and the symlink in blobs/ (unless a real
/// data blob is there already). Blocking.
status register_blob_source(const std::string& store_root, const blob_source& src);

/// The source registered for `digest`; not_found if none.
expected<blob_source> read_blob_source(const std::string& store_root, const std::string& digest);

} // namespace dsec::registry
