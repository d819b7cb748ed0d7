// Which layer an image reference became on this store: <store>/images.json,
// {"version":1,"images":{"<canonical reference>":{"layer":"name@version",
// "manifest":"sha256:..","at_ms":..}}}. Written by pulls (the CLI's and the
// node's), read by creates that name an image, so a node that has an image
// never asks the registry again: a tag is resolved once, when first pulled
// (`dsec layer pull` again refreshes it). Written under the catalog lock,
// atomically, as aliases.json is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/error.hpp"

namespace dsec::layers {
class store;
}

namespace dsec::registry {

struct image_entry {
  std::string layer;
  std::string manifest;
  int64_t at_ms = 0;
};

/// The entry for `canonical` (image_reference::str()); nullopt if none.
/// A corrupt file is an error naming it. Blocking (one small read).
expected<std::optional<image_entry>> find_image(const layers::store& st,
                                                const std::string& canonical);

/// Records `canonical` -> `entry`. Blocking.
status record_image(const layers::store& st, const std::string& canonical,
                    const image_entry& entry);

} // namespace dsec::registry
