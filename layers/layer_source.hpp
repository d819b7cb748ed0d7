// layer_source: how sandbox actors get their layers mounted. The node's real
// source resolves refs in the store catalog and mounts each EROFS image once
// through the mount cache; actor tests substitute an in-memory one. Plain
// C++ over the store (no CAF): the actors hold one in node_context.
//
// A ref the local store lacks (not in the catalog, or its image evicted) is
// handed to the fetcher, which blocks the calling worker thread until the
// image-fetch actor has put the layer into the store from a peer (the node
// installs it: make_layer_fetcher in actors/image_fetch.hpp). Fetched images
// are counted by the blob cache, which evicts unused ones under the node's
// --layer-cache-mb budget.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers {
class store;
class mount_cache;
class blob_cache;
} // namespace dsec::layers

namespace dsec {

/// Mounted layers held by one sandbox.
struct held_layers {
  /// Mount directories, bottom first (spec order).
  std::vector<std::string> dirs;
  /// Digests to release, one per layer.
  std::vector<std::string> digests;
  /// The layers' exec defaults merged bottom to top (merge_layer_configs).
  layer_config config;
};

/// Puts `ref` into the local store (from a peer) and returns its entry.
/// Blocks the calling thread; never call it on a scheduler thread.
using layer_fetcher = std::function<expected<layer_info>(const std::string& ref)>;

/// Thread-safe; every call may block (worker pool only), except held_refs().
class layer_source {
 public:
  virtual ~layer_source() = default;
  /// Installs the fetcher for refs the store lacks (once the actors run).
  virtual void set_fetcher(layer_fetcher) {}
  /// The blob cache of fetched images; null for sources without one.
  virtual std::shared_ptr<layers::blob_cache> cache() { return nullptr; }
  /// Refs whose images this node holds (bounded, sorted), as of the last
  /// refresh; never blocks, so actors may call it.
  virtual std::vector<std::string> held_refs() { return {}; }
  /// Re-reads which refs this node holds (blocking).
  virtual void refresh_held() {}
  /// Resolves `refs` and mounts them; on failure holds nothing.
  virtual expected<held_layers> acquire(const std::vector<std::string>& refs) = 0;
  /// Drops the mounts `digests` held.
  virtual void release(const std::vector<std::string>& digests) = 0;
  /// The catalog.
  virtual expected<std::vector<layer_info>> list() = 0;
};

/// The real source over a store and a mount cache; `cache` (may be null)
/// tracks fetched images for eviction.
std::shared_ptr<layer_source> make_store_layer_source(std::shared_ptr<layers::store> store,
                                                      std::shared_ptr<layers::mount_cache> mounts,
                                                      std::shared_ptr<layers::blob_cache> cache = nullptr);

} // namespace dsec
