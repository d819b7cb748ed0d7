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

/// The range-read unit of lazy blobs. Measured (README, issue 25's note):
/// reading 5% of a 100 MB python-like tree, 256 KiB fetched 2.1x fewer bytes
/// than 1 MiB with about as many requests as 64 KiB would need per useful
/// byte; smaller chunks cost requests (latency), larger ones bytes.
constexpr uint32_t default_chunk_size = 256u << 10;

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
