// blob_cache: the node's budget for layer images it fetched from peers. It
// remembers which blobs of the store were fetched (not built here), when each
// was last used, and, when the store's blobs/ directory holds more bytes than
// the budget, deletes the least recently used fetched blobs that no sandbox
// uses. Built layers are never evicted: this node may be the only holder.
//
// An evicted layer keeps its catalog entry; only the image goes. The next
// create that needs it finds the entry without its image and fetches the
// image again from a peer (layer_source does this), so eviction costs a
// re-fetch, never a failed create while some peer still holds the layer.
//
// Safety against deleting an image a sandbox needs: an image is "in use" while
// a caller has pinned it (pin() before checking that it exists, unpin() once
// it is mounted) or while the mount cache counts users of it (`in_use`). Both
// checks and the unlink happen under one mutex with pin(), so an acquire
// either pins first (the image stays) or finds it gone (and fetches again).
//
// A chunked layer's data blob goes with its image, unless another image in
// the catalog names the same data blob.
//
// The list of fetched blobs and their last-use times is kept in a small JSON
// file (`record_path`, in the node's state dir) so a restarted node still
// knows what it may evict. Plain C++, thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::layers {

class store;

/// Whether `st` holds the image `digest` complete: the image file and, for a
/// chunked layer (layers/blob_device.hpp), the data blob it names. Blocking
/// (reads the image's device table).
bool layer_present(const store& st, const std::string& digest);

/// LRU eviction of fetched layer images under a byte budget.
class blob_cache {
 public:
  /// True while a sandbox on this node has `digest` mounted.
  using in_use_fn = std::function<bool(const std::string& digest)>;

  // -- constructors -----------------------------------------------------------

  /// A cache over `st`'s blobs. `budget_bytes` 0 = unlimited (nothing is ever
  /// evicted). Reads `record_path` if it exists (a corrupt record is logged by
  /// the caller via load()'s error and treated as empty: at worst a fetched
  /// image is kept, never a built one deleted).
  blob_cache(std::shared_ptr<store> st, in_use_fn in_use, uint64_t budget_bytes,
             std::string record_path);

  /// Reads the record of fetched blobs; drops entries whose image is gone.
  status load();

  // -- use --------------------------------------------------------------------

  /// Records that `digest` (`size` bytes) was fetched from a peer and is
  /// therefore evictable; counts as a use now. Saves the record.
  void record_fetched(const std::string& digest, uint64_t size);

  /// Marks `digest` as used now (LRU order). Unknown digests are ignored.
  void touch(const std::string& digest);

  /// Keeps `digest` from eviction until unpin(); nests.
  void pin(const std::string& digest);
  void unpin(const std::string& digest);

  /// If the store's images exceed the budget, deletes least recently used
  /// fetched images that are neither pinned nor in use (and not `keep`) until
  /// the total fits or nothing evictable is left. Returns the evicted digests.
  std::vector<std::string> evict(const std::string& keep = {});

  // -- queries ----------------------------------------------------------------

  /// Bytes of all images in the store's blobs/ directory (built and fetched).
  uint64_t store_bytes() const;

  /// Whether `digest` is recorded as fetched.
  bool is_fetched(const std::string& digest) const;

  /// Images evicted since start.
  uint64_t evictions() const;

  uint64_t budget_bytes() const { return budget_; }
  const std::shared_ptr<store>& store_ptr() const { return store_; }

 private:
  struct entry {
    uint64_t size = 0;
    int64_t last_use_ms = 0;
    uint64_t seq = 0; // LRU order; ties in wall time broken by use order
  };

  status save_locked() const;
  /// Whether an image still in the store names the data blob `data`.
  bool data_blob_shared(const std::string& data) const;

  std::shared_ptr<store> store_;
  in_use_fn in_use_;
  uint64_t budget_;
  std::string record_path_;
  mutable std::mutex mu_;
  std::map<std::string, entry> fetched_; // by digest
  std::map<std::string, int> pins_;
  uint64_t seq_ = 0;
  uint64_t evictions_ = 0;
};

} // namespace dsec::layers
