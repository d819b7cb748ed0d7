// layer_source: how sandbox actors get their layers mounted. The node's real
// source resolves refs in the store catalog and mounts each EROFS image once
// through the mount cache; actor tests substitute an in-memory one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers {
class store;
class mount_cache;
} // namespace dsec::layers

namespace dsec {

/// Mounted layers held by one sandbox.
struct held_layers {
  /// Mount directories, bottom first (spec order).
  std::vector<std::string> dirs;
  /// Digests to release, one per layer.
  std::vector<std::string> digests;
};

/// Thread-safe; every call may block (worker pool only).
class layer_source {
 public:
  virtual ~layer_source() = default;
  /// Resolves `refs` and mounts them; on failure holds nothing.
  virtual expected<held_layers> acquire(const std::vector<std::string>& refs) = 0;
  /// Drops the mounts `digests` held.
  virtual void release(const std::vector<std::string>& digests) = 0;
  /// The catalog.
  virtual expected<std::vector<layer_info>> list() = 0;
};

/// The real source over a store and a mount cache.
std::shared_ptr<layer_source> make_store_layer_source(std::shared_ptr<layers::store> store,
                                                      std::shared_ptr<layers::mount_cache> mounts);

} // namespace dsec
