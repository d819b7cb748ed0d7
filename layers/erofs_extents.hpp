// Where each file's data lies in a chunked layer's data blob, read from its
// EROFS metadata image. The lazy blob daemon sees only byte ranges of the
// blob; with this map it reads a file whole on its first miss (one range
// request per file instead of one per kernel read, and nothing past the
// file's end), which is what makes on-demand reads cheap on a registry that
// charges per request (bench/range_latency.py).
//
// The walk follows the directory tree from the root inode (fs/erofs/
// erofs_fs.h): directories are flat (plain or tail-packed) in the metadata
// image; a regular file with the chunk-based layout has one chunk index (or a
// 4-byte block address) per chunk, naming the device (0: the image itself, 1:
// the data blob, or a flat address past the blob's mapped_blkaddr) and the
// start block. Files whose data sits in the image itself are not in the map.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::layers {

/// Bytes [start, end) of a data blob that hold one file's data (a whole
/// file, or the part of it between holes).
struct blob_extent {
  uint64_t start = 0;
  uint64_t end = 0;
  bool operator==(const blob_extent& o) const { return start == o.start && end == o.end; }
};

/// Every data blob extent of the EROFS image at `image`, sorted by start and
/// disjoint (chunks shared by deduplication merge with their neighbours).
/// invalid_argument names the image and what is malformed; not_found if it
/// is missing. Blocking (reads the image, a few MB).
expected<std::vector<blob_extent>> read_blob_extents(const std::string& image);

/// The same from an image already in memory; `what` names it in errors.
expected<std::vector<blob_extent>> parse_blob_extents(const std::string& image_bytes,
                                                      const std::string& what);

/// 16 bytes per extent: start and end, little-endian u64.
std::string encode_blob_extents(const std::vector<blob_extent>& extents);

/// What encode_blob_extents wrote; invalid_argument if the length is not a
/// multiple of 16 or the extents are unsorted, overlapping or empty.
expected<std::vector<blob_extent>> decode_blob_extents(const std::string& bytes);

/// The extent holding byte `offset`; nullptr if none does.
const blob_extent* extent_at(const std::vector<blob_extent>& extents, uint64_t offset);

} // namespace dsec::layers
