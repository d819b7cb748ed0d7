// The file extents of a lazily read data blob (layers/erofs_extents.hpp),
// saved beside its chunk list when the blob is registered, so the lazy blob
// daemon can read a file whole on its first miss without the metadata image:
//
//   <store>/lazy/sources/sha256-<hex>.extents   16 bytes per extent
//
// Derived from the metadata image, which the layer's digest covers; a blob
// registered without it (an older registration, an image the walk cannot
// read) is read a kernel read at a time, as before.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"
#include "layers/erofs_extents.hpp"

namespace dsec::registry {

/// <store>/lazy/sources/sha256-<hex>.extents for blob `digest`; empty for a
/// digest that is not sha256:<64 hex>.
std::string blob_extents_path(const std::string& store_root, const std::string& digest);

/// Writes the extents of blob `digest` (atomically).
status save_blob_extents(const std::string& store_root, const std::string& digest,
                         const std::vector<layers::blob_extent>& extents);

/// The extents saved for `digest`; not_found if none.
expected<std::vector<layers::blob_extent>> load_blob_extents(const std::string& store_root,
                                                             const std::string& digest);

} // namespace dsec::registry
