// The lazy blob daemon's chunk cache: a bounded on-disk store of fixed-size
// chunks of remote data blobs, keyed by (blob digest, chunk index), evicted
// least recently used first under a byte budget (`--chunk-cache-mb`).
//
//   <dir>/blobs/<blob hex>-<chunk size>   one sparse file per blob: chunk i
//                                         at i x chunk size, a hole where no
//                                         chunk is held
//
// One file per blob, not one per chunk: a chunk stored is one pwrite (a
// stretch of chunks fetched together, one pwrite for all), a chunk read is
// one pread on a descriptor kept open, an eviction punches the chunk's
// blocks out (fallocate). A file per chunk cost a create, a rename and a
// directory check per chunk, an open per read, and the inode churn of
// ext4; on a burst of lazy reads that was a third of the daemon's CPU
// (bench/registry_bench.py, perf).
//
// A missing chunk is fetched through the caller's function, with bounded
// retries and backoff, and verified before it is stored: its length must be
// exactly what the blob's size gives for that index, and, when the source
// carries a chunk digest list (registry/chunk_list.hpp), its sha256 must
// match. The whole blob's digest cannot be checked a chunk at a time; the
// list's own digest is covered by the artifact's manifest. A chunk enters
// the table only once its bytes are written. At the next open the held
// chunks are read back from the files' data extents (SEEK_DATA/SEEK_HOLE):
// a chunk counts only where all its bytes are data, so one torn by a crash
// is a hole and fetched again, and each is checked against its digest at
// its first read.
//
// Concurrent reads of the same missing chunk share one fetch: the first
// reader fetches, the others wait for its result. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::lazyfs {

/// The cache's counters since it was opened (stats.json, /metrics).
struct cache_counters {
  /// Chunk reads served from the cache.
  uint64_t hits = 0;
  /// Chunk reads that found no chunk (served by a fetch, theirs or shared).
  uint64_t misses = 0;
  /// Chunks fetched, verified and delivered.
  uint64_t chunks_fetched = 0;
  /// Range requests made (each attempt; a stretch of chunks is one), and
  /// the time readers spent waiting on them, in microseconds.
  uint64_t range_requests = 0;
  uint64_t fetch_us = 0;
  /// Body bytes received by fetch attempts (failed ones included).
  uint64_t bytes_fetched = 0;
  /// Chunks removed to stay under the budget.
  uint64_t evictions = 0;
  /// Chunk reads that failed after every attempt (the reader got EIO).
  uint64_t read_errors = 0;
  /// Fetched chunks refused by verification (wrong length or digest).
  uint64_t verify_failures = 0;
  /// Bytes and chunks held now.
  uint64_t cache_bytes = 0;
  uint64_t cache_chunks = 0;
};

/// One chunk to read, and how to fetch it when the cache lacks it.
struct chunk_request {
  /// Hex digest of the whole blob (the cache key's first half).
  std::string blob;
  uint64_t index = 0;
  /// The chunk's exact length: chunk_size, less for the blob's last chunk.
  uint32_t length = 0;
  /// The blob's chunk size: chunk `index` starts at index x chunk_size.
  uint32_t chunk_size = 0;
  /// The chunk's sha256 (hex) when the source has a chunk digest list;
  /// empty: only the length is checked.
  std::string sha256;
  /// One attempt at the chunk's bytes (a range request); must itself be
  /// bounded in time.
  std::function<expected<std::string>()> fetch;
};

/// Retry policy of a fetch. Three attempts with 0.25 s and 1 s between
/// them ride out a registry restart or a dropped connection; with each
/// attempt bounded (the daemon bounds range requests to 5 s) a reader waits
/// at most ~17 s, inside `deadline`, before it gets EIO.
struct retry_policy {
  int attempts = 3;
  std::vector<std::chrono::milliseconds> backoff{std::chrono::milliseconds{250},
                                                 std::chrono::milliseconds{1000}};
  /// No new attempt starts past this time since the first.
  std::chrono::milliseconds deadline{20000};
  /// A chunk whose fetch just failed fails again at once for this long: the
  /// kernel retries a failed page read (EROFS, then the page cache), and a
  /// reader must get its EIO within one bound, not three.
  std::chrono::milliseconds failure_hold{5000};
};

class chunk_cache {
 public:
  // -- constructors -----------------------------------------------------------

  /// Opens (creating) the cache at `dir` with a budget of `budget_bytes`
  /// (at least one chunk is always kept in memory while it is read). Chunks
  /// left by an earlier run are taken back, the files least recently
  /// written first in LRU order; anything else in the directory (the chunk
  /// files and temp files of older nodes) is removed; the cache is trimmed
  /// to the budget.
  static expected<std::unique_ptr<chunk_cache>> open(const std::string& dir,
                                                     uint64_t budget_bytes,
                                                     retry_policy retry = {});

  // -- reads ------------------------------------------------------------------

  /// Copies bytes [off, off+len) of chunk `req` into `out` (off+len <=
  /// req.length), fetching and storing the chunk first if it is missing.
  /// Returns the bytes copied, or the last fetch's error after every attempt
  /// (counted in read_errors). Blocking.
  expected<size_t> read(const chunk_request& req, uint32_t off, uint32_t len, char* out);

  /// The bytes of `length` bytes of consecutive chunks starting at `first`'s
  /// (one range request, bounded in time).
  using range_fetch =
      std::function<expected<std::string>(const chunk_request& first, uint64_t length)>;

  /// Fetches the chunks of `run` (consecutive chunks of one blob, in order)
  /// that are neither cached, being fetched nor recently failed, with one
  /// range request per span instead of one per chunk: a stretch of such
  /// chunks, joined with the next one when the chunks between them (held
  /// here or fetched by another reader) come to at most `max_gap` bytes
  /// (lazyfs/fetch_plan.hpp; those bytes are fetched again and dropped).
  /// Each chunk is verified and stored as read() would (one that the span
  /// got wrong is fetched again on its own), with the retries of read();
  /// readers of those chunks wait for it meanwhile. read() then serves them.
  /// Blocking.
  void fetch_missing(const std::vector<chunk_request>& run, const range_fetch& fetch_range,
                     uint64_t max_gap = 0);

  // -- observers --------------------------------------------------------------

  [[nodiscard]] cache_counters counters() const;
  /// Whether chunk `index` of blob `blob` (hex) is held now (no LRU touch).
  [[nodiscard]] bool holds(const std::string& blob, uint64_t index) const;
  [[nodiscard]] uint64_t budget_bytes() const { return budget_; }
  [[nodiscard]] const std::string& dir() const { return dir_; }

 private:
  struct inflight;
  using key = std::pair<std::string, uint64_t>;
  /// A blob's sparse file.
  struct blob_file {
    sys::unique_fd fd;
    std::string path;
    uint32_t chunk_size = 0;
    /// The file system's block: evictions punch whole blocks only.
    uint64_t block = 4096;
    /// Chunks of the table in this file; at 0 the file goes.
    uint64_t chunks = 0;
  };
  struct entry {
    uint64_t size = 0;
    std::list<key>::iterator lru;
    std::shared_ptr<blob_file> file;
    /// Readers copying from it now: never evicted meanwhile.
    int pins = 0;
    /// False for a chunk found at open: checked against its digest at its
    /// first read.
    bool verified = true;
  };

  chunk_cache(std::string dir, uint64_t budget, retry_policy retry);

  /// The file of `req`'s blob, opened (created) on first use. mu_ held.
  expected<std::shared_ptr<blob_file>> file_locked(const chunk_request& req);
  status load_existing();
  /// Adopts the chunks of one blob file found at open (unverified).
  void adopt_file(const std::string& name, std::vector<std::pair<int64_t, key>>& order);
  /// Fetches (with retries) and verifies `req`; counts bytes and failures.
  expected<std::string> fetch_verified(const chunk_request& req);
  /// Up to retry_.attempts calls of `attempt` until one answers bytes that
  /// `check` finds no fault with (it says why, else empty); errors name `what`.
  expected<std::string> fetch_attempts(const std::string& what,
                                       const std::function<expected<std::string>()>& attempt,
                                       const std::function<std::string(const std::string&)>& check);
  /// Why `got` is not chunk `req` (length, digest); empty if it is.
  std::string verify(const chunk_request& req, std::string_view got);
  /// Writes `len` bytes of consecutive chunks, the first `first`, into its
  /// blob's file; the file written, to enter them in the table.
  expected<std::shared_ptr<blob_file>> store(const chunk_request& first, const char* data,
                                             size_t len);
  /// Records a fetch's outcome (stored in `file` when it is set), wakes the
  /// readers waiting on `flight`, and hands the bytes to the fetching reader.
  expected<std::shared_ptr<const std::string>> finish(const chunk_request& req,
                                                      const std::shared_ptr<inflight>& flight,
                                                      expected<std::string> got,
                                                      const std::shared_ptr<blob_file>& file);
  /// Stores a fetched chunk, then finish().
  expected<std::shared_ptr<const std::string>> complete(const chunk_request& req,
                                                        const std::shared_ptr<inflight>& flight,
                                                        expected<std::string> got);
  /// Enters `k`, stored in `file`, as most recently used and evicts past
  /// the budget. A file evicted empty meanwhile is not the blob's any more:
  /// the chunk is then not entered. mu_ held.
  void insert_locked(const key& k, uint64_t size, const std::shared_ptr<blob_file>& file);
  void evict_locked();
  /// Drops `k` from the table and frees its blocks. mu_ held.
  void erase_locked(std::map<key, entry>::iterator it);
  /// Copies from the stored chunk; false if it is gone or fails its check.
  bool read_stored(const chunk_request& req, uint32_t off, uint32_t len, char* out);

  std::string dir_;
  uint64_t budget_;
  retry_policy retry_;
  mutable std::mutex mu_;
  std::map<key, entry> entries_;
  /// Most recently used first.
  std::list<key> lru_;
  /// Blob files open, by blob hex.
  std::map<std::string, std::shared_ptr<blob_file>> files_;
  std::map<key, std::shared_ptr<inflight>> inflight_;
  /// Chunks whose last fetch failed: when, and why.
  std::map<key, std::pair<std::chrono::steady_clock::time_point, error>> failed_;
  cache_counters counters_;
};

} // namespace dsec::lazyfs
