// Layers stored as metadata + data blob, the DSec layout: the EROFS image
// (`sha256-<hex>.erofs`, a few KB to MB of inodes, directories and chunk
// indexes; its digest names the layer) stays small, and every file's data
// lives in a separate data blob (`sha256-<data hex>.blob`, named by its own
// digest) built with `mkfs.erofs --chunksize=N --blobdev=FILE`. The kernel
// mounts the image file-backed with `-o device=<data blob>` and reads only the
// data blocks a sandbox touches.
//
// Where the data blob's digest is recorded: in the image itself. EROFS keeps a
// device table of 128-byte slots, each with a 64-byte `tag` that names the
// device (fscache mode uses it as the blob id; with `device=` the kernel
// ignores it). After mkfs we write the data blob's 64 hex digits into the
// slot's tag (and its size in blocks), then fix the superblock checksum, and
// only then digest the image. So the layer digest covers the data blob's
// digest: verifying the image verifies the name of its data, and a node finds
// the data blob from the image alone; no sidecar file, no catalog field.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::layers {

/// File name suffix of data blobs in `<root>/blobs/`.
constexpr const char* data_blob_suffix = ".blob";

/// The data blob an image refers to: its "sha256:<hex>" digest and size in
/// blocks as recorded in the image.
struct data_blob_ref {
  std::string digest;
  uint64_t blocks = 0;
  /// The image's block size in bytes.
  uint32_t block_size = 0;
};

/// Reads the device table of the EROFS image at `image`. Returns an empty
/// digest for a self-contained image (no extra device), the recorded data
/// blob for one extra device whose tag is 64 hex digits. Errors name the
/// image: not_found if missing, invalid_argument if it is not EROFS, has more
/// than one extra device, or a tag that is not a digest (an image built by
/// plain mkfs --blobdev whose data blob dsec cannot find).
expected<data_blob_ref> read_data_blob_ref(const std::string& image);

/// Records `digest` ("sha256:<hex>") and `blob_bytes` in the single extra
/// device slot of the EROFS image at `image` and recomputes the superblock
/// checksum. For images just built with --blobdev, before they are digested.
status write_data_blob_ref(const std::string& image, const std::string& digest,
                           uint64_t blob_bytes);

/// `<directory of image_path>/sha256-<hex of digest><data_blob_suffix>`: the
/// data blob sits next to its image. Empty for an invalid digest.
std::string data_blob_path(const std::string& image_path, const std::string& digest);

/// CRC32C (Castagnoli) as the kernel computes EROFS superblock checksums:
/// seeded with `seed`, no final inversion.
uint32_t erofs_crc32c(uint32_t seed, const unsigned char* data, size_t len);

} // namespace dsec::layers
