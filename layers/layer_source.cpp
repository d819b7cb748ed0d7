// The store-backed layer source. A ref whose entry or image is missing goes to
// the fetcher (the image-fetch actor, through a blocking request from this
// worker thread); the image is pinned in the blob cache from the moment it is
// found present until it is mounted, so an eviction running at the same time
// either skips it or has already deleted it (then it is fetched again).
#include "layers/layer_source.hpp"

#include <algorithm>
#include <mutex>

#include "core/layer_config.hpp"
#include "layers/blob_cache.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "sys/cleanup.hpp"
#include "sys/fs.hpp"

namespace dsec {

namespace {

/// Refs a node advertises as held: enough for locality hints, bounded so a
/// store with thousands of layers does not bloat every gossip load report.
constexpr size_t max_held_refs = 64;

/// Fetches of one ref within one acquire: a fetched image that an eviction
/// deletes before it is pinned is fetched again, but not forever.
constexpr int max_fetch_attempts = 3;

class store_source final : public layer_source {
 public:
  store_source(std::shared_ptr<layers::store> store, std::shared_ptr<layers::mount_cache> mounts,
               std::shared_ptr<layers::blob_cache> cache)
    : store_(std::move(store)), mounts_(std::move(mounts)), cache_(std::move(cache)) {
    refresh_held();
  }

  void set_fetcher(layer_fetcher f) override {
    std::lock_guard<std::mutex> guard{mu_};
    fetcher_ = std::move(f);
  }

  std::shared_ptr<layers::blob_cache> cache() override { return cache_; }

  std::vector<std::string> held_refs() override {
    std::lock_guard<std::mutex> guard{mu_};
    return held_;
  }

  void refresh_held() override {
    std::vector<std::string> held;
    for (auto& l : store_->list()) {
      if (held.size() >= max_held_refs)
        break;
      if (layers::layer_present(*store_, l.digest))
        held.push_back(l.ref);
    }
    std::lock_guard<std::mutex> guard{mu_};
    held_ = std::move(held);
  }

  expected<held_layers> acquire(const std::vector<std::string>& refs) override {
    held_layers out;
    sys::cleanup_stack undo;
    std::vector<layer_config> configs; // bottom first, as the refs
    for (auto& ref : refs) {
      auto layer = locate(ref); // pinned in the cache, image present
      if (!layer)
        return layer.err();
      auto dir = mounts_->acquire(*layer, store_->blob_path(layer->digest));
      if (cache_) {
        cache_->touch(layer->digest);
        cache_->unpin(layer->digest); // the mount's refcount protects it now
      }
      if (!dir)
        return dir.err();
      undo.push([this, d = layer->digest] { mounts_->release(d); });
      out.dirs.push_back(*dir);
      out.digests.push_back(layer->digest);
      configs.push_back(layer->config);
    }
    out.config = merge_layer_configs(configs);
    undo.commit();
    return out;
  }

  void release(const std::vector<std::string>& digests) override {
    for (auto& d : digests)
      mounts_->release(d);
    if (cache_ && !cache_->evict().empty())
      refresh_held();
  }

  expected<std::vector<layer_info>> list() override {
    refresh_held();
    return store_->try_list();
  }

 private:
  layer_fetcher fetcher() {
    std::lock_guard<std::mutex> guard{mu_};
    return fetcher_;
  }

  /// `ref`'s entry with its image present in the store and pinned (if there
  /// is a cache); fetched from a peer when the entry or the image is missing.
  expected<layer_info> locate(const std::string& ref) {
    auto layer = store_->resolve(ref);
    auto fetch = fetcher();
    bool fetched = false; // `layer` is a fetch's answer: its error is final
    for (int attempt = 0;; ++attempt) {
      if (!layer) {
        if (fetched || layer.err().code != errc::not_found || !fetch)
          return layer.err();
        layer = fetch(ref);
        fetched = true;
        continue;
      }
      if (cache_)
        cache_->pin(layer->digest);
      if (layers::layer_present(*store_, layer->digest))
        return layer;
      if (cache_)
        cache_->unpin(layer->digest);
      if (!fetch || attempt >= max_fetch_attempts)
        return not_found("layer " + ref + ": its image " + store_->blob_path(layer->digest)
                         + " (or the data blob it names) is missing from the store"
                         + (fetch ? " (fetched again, evicted again)" : ""));
      layer = fetch(ref);
      fetched = true;
    }
  }

  std::shared_ptr<layers::store> store_;
  std::shared_ptr<layers::mount_cache> mounts_;
  std::shared_ptr<layers::blob_cache> cache_;
  std::mutex mu_;
  layer_fetcher fetcher_;
  std::vector<std::string> held_;
};

} // namespace

std::shared_ptr<layer_source> make_store_layer_source(std::shared_ptr<layers::store> store,
                                                      std::shared_ptr<layers::mount_cache> mounts,
                                                      std::shared_ptr<layers::blob_cache> cache) {
  return std::make_shared<store_source>(std::move(store), std::move(mounts), std::move(cache));
}

} // namespace dsec
