// The store-backed layer source.
#include "actors/layer_source.hpp"

#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "sys/cleanup.hpp"

namespace dsec {

namespace {

class store_source final : public layer_source {
 public:
  store_source(std::shared_ptr<layers::store> store, std::shared_ptr<layers::mount_cache> mounts)
    : store_(std::move(store)), mounts_(std::move(mounts)) {}

  expected<held_layers> acquire(const std::vector<std::string>& refs) override {
    held_layers out;
    sys::cleanup_stack undo;
    for (auto& ref : refs) {
      auto layer = store_->resolve(ref);
      if (!layer)
        return layer.err();
      auto dir = mounts_->acquire(*layer, store_->blob_path(layer->digest));
      if (!dir)
        return dir.err();
      undo.push([this, d = layer->digest] { mounts_->release(d); });
      out.dirs.push_back(*dir);
      out.digests.push_back(layer->digest);
    }
    undo.commit();
    return out;
  }

  void release(const std::vector<std::string>& digests) override {
    for (auto& d : digests)
      mounts_->release(d);
  }

  expected<std::vector<layer_info>> list() override { return store_->try_list(); }

 private:
  std::shared_ptr<layers::store> store_;
  std::shared_ptr<layers::mount_cache> mounts_;
};

} // namespace

std::shared_ptr<layer_source> make_store_layer_source(std::shared_ptr<layers::store> store,
                                                      std::shared_ptr<layers::mount_cache> mounts) {
  return std::make_shared<store_source>(std::move(store), std::move(mounts));
}

} // namespace dsec
