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

/// The verification and cache unit of lazy blobs, measured by
/// bench/chunk_size_bench.py (/usr/lib/python3* as a chunked layer, 441 MB
/// of data blob, in a local docker-registry; a reader reads 5% of its 15,706
/// files at random, 31.9 MB; a read's missing chunks are one range request):
///
///   chunk    fetched (share of blob)   range requests   loopback, all reads
///   16 KiB   46.7 MB (10.6%)           952              9.7 s
///   32 KiB   57.7 MB (13.1%)           923              9.4 s
///   64 KiB   78.4 MB (17.8%)           878              8.6 s
///   128 KiB  111.9 MB (25.4%)          798              8.9 s
///
/// Requests follow the files read, not the chunk: a file's extent is one
/// request whatever the chunk. Bytes grow with the chunk, as small files cost
/// a whole chunk each. 16 KiB fetches 1.46x what is read, 128 KiB 3.5x; the
/// list costs 32 bytes per chunk (0.2% of the blob) and the cache one file
/// per chunk. 4 KiB would fetch 1.2x but quadruple the list and the files.
constexpr uint32_t default_chunk_size = 16u << 10;

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
