// The writable upper of a VM guest's root: a raw ext4 image of `disk_mb`
// attached as one more virtio-blk disk (serial "dsec-upper", read-write),
// which the guest mounts as its overlay's upper and work dirs. The guest's
// writes go to the host disk, not to guest RAM, and the image size is the
// sandbox's disk limit (ENOSPC in the guest past it).
//
// The node formats one pristine image per size once (mkfs.ext4, no journal:
// the upper is scratch space that dies with its sandbox) in its VM work dir;
// every guest gets its own sparse copy (a reflink where the filesystem can,
// else only the data extents are copied: a few MiB of metadata).
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::backends {

/// The pristine upper image of `disk_mb` MiB in `dir` (made now if missing:
/// mkfs.ext4; blocking, thread-safe).
expected<std::string> pristine_upper(const std::string& dir, int64_t disk_mb);

/// Copies the image `from` to `to` (replaced if it exists), keeping holes:
/// FICLONE first, else the data extents (SEEK_DATA/SEEK_HOLE). On failure
/// `to` does not exist.
status copy_image(const std::string& from, const std::string& to);

} // namespace dsec::backends
