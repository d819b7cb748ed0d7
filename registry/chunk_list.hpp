// The chunk digest list of a lazily read data blob: the sha256 of every
// fixed-size chunk, in order, 32 raw bytes each. A layer artifact carries it
// beside the data blob (layers[2], chunk_list_media_type, the chunk size in
// an annotation), so the lazy blob daemon verifies each chunk it fetches by a
// range request; the list itself is verified against its digest in the
// manifest, and the manifest against the reference. Stored per source as
// <store>/lazy/sources/sha256-<hex>.chunks.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::registry {

constexpr const char* chunk_list_media_type = "application/vnd.dsec.erofs.chunks.v1";
/// The manifest annotation on the chunk list naming its chunk size in bytes.
constexpr const char* chunk_size_annotation = "dev.dsec.chunk-size";

/// The range-read unit of lazy blobs, measured by bench/chunk_size_bench.py
/// (a 117 MB python tree as a chunked layer in a local docker-registry, a
/// reader reading 5% of its 5,218 files, 3.3 MB, at random):
///
///   chunk   fetched (share of blob)   requests   loopback, all reads   1 Gbit/s + 1 ms model
///   64 KiB  17.5 MB (15%)             267        3.2-4.9 s             0.41 s
///   128 KiB 28.8 MB (25%)             220        1.4 s                 0.45 s
///   256 KiB 45.1 MB (38%)             172        1.4-1.8 s             0.53 s
///   1 MiB   82.6 MB (70%)              79        2.0-2.2 s             0.74 s
///
/// Small files make every read cost about one chunk, so bytes grow with the
/// chunk; each request costs 5-15 ms here (registry, curl, FUSE on a loaded
/// 2-core host), more against an object-store-backed registry, so 64 KiB
/// loses on time. 128 KiB fetches 36% less than DSec's 256 KiB in the same
/// time here and matches the kernel's 128 KiB FUSE reads and readahead.
constexpr uint32_t default_chunk_size = 128u << 10;

/// The chunk list of the file at `blob_path` in chunks of `chunk_size`
/// bytes (the last one shorter). Blocking (reads the file once).
expected<std::string> make_chunk_list(const std::string& blob_path, uint32_t chunk_size);

/// <store>/lazy/sources/sha256-<hex>.chunks for blob `digest`.
std::string chunk_list_path(const std::string& store_root, const std::string& digest);

/// Writes the list for blob `digest` (atomically); invalid_argument if its
/// length is not a multiple of 32.
status save_chunk_list(const std::string& store_root, const std::string& digest,
                       const std::string& list);

/// The list saved for `digest`; not_found if none (only lengths are then
/// checked).
expected<std::string> load_chunk_list(const std::string& store_root, const std::string& digest);

/// The hex sha256 of chunk `index` in `list`; empty if the list is shorter.
std::string chunk_digest_hex(const std::string& list, uint64_t index);

} // namespace dsec::registry
