// The lazy blob file system: a read-only libfuse3 mount at <store>/lazy/mnt
// whose root holds one `sha256-<hex>.blob` per registered lazy source
// (registry/lazy_source.hpp), each of the blob's declared size. A source is
// looked up when the kernel asks for its name, so registering one needs no
// message to the daemon. read(offset, len) is served from the chunk cache;
// a missing chunk is fetched by one range request through a range_fetcher
// (the registry in the daemon, a file in tests), retried with backoff and
// bounded in time; a read that still fails answers EIO and is counted.
//
// The kernel's EROFS mounts open these files as their data device
// (`-o device=<store>/blobs/sha256-<hex>.blob`, a symlink here), so the
// number of open files says whether any layer mount still needs the daemon.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "lazyfs/chunk_cache.hpp"
#include "lazyfs/fetch_plan.hpp"
#include "registry/byteranges.hpp"
#include "registry/lazy_source.hpp"

namespace dsec::lazyfs {

/// Where chunk bytes come from: one attempt at a byte range of a blob,
/// bounded in time by the implementation.
class range_fetcher {
 public:
  virtual ~range_fetcher() = default;
  /// Bytes [offset, offset+len) of `src`'s blob.
  virtual expected<std::string> fetch(const registry::blob_source& src, uint64_t offset,
                                      uint32_t len) = 0;
  /// Several ranges of `src`'s blob (sorted, disjoint): the bytes of each, in
  /// order. Here one fetch() each; the registry's sends one request.
  virtual expected<std::vector<std::string>> fetch_ranges(
    const registry::blob_source& src, const std::vector<registry::byte_range>& ranges);
  /// Requests that went straight to a blob's storage location, past its
  /// registry (registry/storage_locations.hpp); 0 for fetchers without one.
  [[nodiscard]] virtual uint64_t storage_reads() const { return 0; }
};

class blob_fs {
 public:
  /// A file system over the sources registered in `store_root`, reading
  /// through `cache` and `fetcher`, making range requests as `policy`
  /// says (merging across held chunks, readahead of streams).
  blob_fs(std::string store_root, std::shared_ptr<chunk_cache> cache,
          std::shared_ptr<range_fetcher> fetcher, fetch_policy policy = {});

  /// Mounts at `mount_dir` (read-only, allow_other) and serves on several
  /// threads until the mount is unmounted or the process gets SIGTERM,
  /// SIGINT or SIGHUP (then it unmounts itself). `on_mounted` runs once the
  /// mount is live. Blocking.
  status serve(const std::string& mount_dir, const std::function<void()>& on_mounted = {});

  /// The read path without the kernel: bytes [offset, offset+len) of blob
  /// `hex`, short at its end. EIO-worthy failures are errors. For tests and
  /// the FUSE read handler.
  expected<size_t> read(const std::string& hex, uint64_t offset, size_t len, char* out);

  /// The source named `hex` (cached after the first lookup); not_found.
  expected<std::shared_ptr<const registry::blob_source>> source(const std::string& hex);

  /// Files open now (EROFS mounts hold theirs until unmounted).
  [[nodiscard]] int64_t open_files() const { return open_files_.load(); }
  /// Readers whose read missed and that wait on range requests now.
  [[nodiscard]] int waiting_readers() const { return waiting_.load(); }
  [[nodiscard]] const std::shared_ptr<chunk_cache>& cache() const { return cache_; }
  [[nodiscard]] const std::string& store_root() const { return store_root_; }

  /// Called (on a FUSE thread) whenever a blob is opened or released; set
  /// before serve(). The daemon rewrites its stats at once then.
  void on_open_change(std::function<void()> f) { open_change_ = std::move(f); }

  // Called by the FUSE handlers (blob_fs.cpp).
  void note_open() {
    open_files_.fetch_add(1);
    if (open_change_)
      open_change_();
  }
  void note_release() {
    open_files_.fetch_sub(1);
    if (open_change_)
      open_change_();
  }

 private:
  struct source_state {
    std::shared_ptr<const registry::blob_source> src;
    /// Chunk digest list (registry/chunk_list.hpp); empty: length checks only.
    std::string chunks;
    /// Where each file lies in the blob (registry/blob_extents.hpp); empty:
    /// reads are not widened to whole files.
    std::vector<layers::blob_extent> extents;
  };

  expected<std::shared_ptr<const source_state>> lookup(const std::string& hex);

  std::string store_root_;
  std::shared_ptr<chunk_cache> cache_;
  std::shared_ptr<range_fetcher> fetcher_;
  fetch_policy policy_;
  stream_table streams_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const source_state>> sources_;
  std::atomic<int64_t> open_files_{0};
  std::atomic<int> waiting_{0};
  std::function<void()> open_change_;
};

/// "sha256-<hex>.blob" -> "<hex>"; empty if the name is not one.
std::string blob_name_hex(const std::string& name);

} // namespace dsec::lazyfs
