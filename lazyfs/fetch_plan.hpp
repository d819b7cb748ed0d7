// Which range requests a lazy read makes: the rules that turn the chunks a
// read (and its readahead) touches into as few HTTP Range requests as make
// sense, since on a busy registry each request costs far more than the bytes
// it carries.
//
//   merge     stretches of missing chunks separated by at most `max_gap`
//             bytes of chunks the cache holds (or another reader is fetching)
//             become one request; the gap's bytes are fetched again and
//             dropped. A wider gap splits the request.
//   readahead a read that starts where an earlier read of the same blob
//             ended (a stream: a file read front to back), once the stream
//             has read twice `readahead_min`, also fetches the chunks after
//             it, as many bytes as the stream has read so far, within
//             [min, max]. (The kernel's own 128 KiB readahead on the FUSE
//             file makes a short stream of every small file: those get no
//             more.) The daemon caps it at 512 KiB.
//   whole file when the blob's file extents are known (EROFS metadata,
//             registry/blob_extents.hpp), a read that misses fetches the
//             whole file it starts in, up to a bound, in one request: a
//             reader that opens a file reads it to its end, and a request
//             costs the registry as much for 16 KiB as for 1 MiB. Stream
//             readahead is then left to files past that bound.
//   neighbours when the registry is busy (other readers of the daemon wait
//             on range requests), that request also carries the files that
//             follow the missed one in the blob, whole and not yet held, up
//             to a window: fewer requests for some bytes nobody may read,
//             paid only when requests queue (a lone reader's requests are
//             cheap and it fetches no more than its files).
//
// Pure functions and a small thread-safe table; no I/O. Every chunk still
// goes through the cache's verification (length, chunk list digest).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "layers/erofs_extents.hpp"

namespace dsec::lazyfs {

/// The read policy of the lazy blob daemon (constants in the daemon; tests
/// set their own).
struct fetch_policy {
  /// Largest run of held chunks, in bytes, that a request fetches again to
  /// join the missing stretches on both sides of it.
  uint64_t max_gap = 64u << 10;
  /// Readahead of a stream: at least `readahead_min`, at most
  /// `readahead_max` bytes, else what the stream has read so far. 0: none.
  uint64_t readahead_min = 128u << 10;
  uint64_t readahead_max = 1u << 20;
  /// A read that misses inside a file (blob extents known) fetches the
  /// whole file, at most this many bytes from the read on; 0: only what
  /// the read touches. (The daemon sets it; see whole_file_span.)
  uint64_t max_file_fetch = 0;
  /// When at least `busy_readers` other readers wait on range requests at a
  /// miss inside a known file, its request also carries the following files
  /// of the blob, whole, while the request stays within `neighbour_window`
  /// bytes and their chunks are missing (see neighbour_span). 0: never.
  uint64_t neighbour_window = 0;
  int busy_readers = 2;
};

/// One range request: chunks [first, last] of a blob.
struct chunk_span {
  uint64_t first = 0;
  uint64_t last = 0;
  bool operator==(const chunk_span& o) const { return first == o.first && last == o.last; }
};

/// The requests for the chunks `first`, `first`+1, ... whose `missing[i]`
/// is true, chunks of `chunk_size` bytes: consecutive missing chunks are one
/// span, and two spans are joined when the held chunks between them amount
/// to at most `max_gap` bytes. Spans come in order and never start or end
/// on a held chunk.
std::vector<chunk_span> plan_spans(uint64_t first, const std::vector<bool>& missing,
                                   uint64_t chunk_size, uint64_t max_gap);

/// The chunks a read of [offset, offset+len) of a blob of `blob_size` bytes
/// fetches when it misses and the blob's file extents are known: the read's
/// own chunks widened to the whole file (extent) its first byte lies in, as
/// a reader of a file reads it to the end. A file longer than
/// `max_file_fetch` bytes is fetched from the read on, that many bytes (at
/// least the read). Past the file nothing is fetched: the next file in the
/// blob is another reader's. No extent at `offset`, or max_file_fetch 0:
/// the read's own chunks.
chunk_span whole_file_span(const std::vector<layers::blob_extent>& extents, uint64_t offset,
                           uint64_t len, uint64_t chunk_size, uint64_t blob_size,
                           uint64_t max_file_fetch);

/// `span`, the whole_file_span of a miss at `offset`, widened over the files
/// that follow in the blob: whole files only, in blob order, while the span
/// stays within `window` bytes from its first chunk and every chunk it adds
/// is missing (`missing(index)`); it stops at the first file that breaks
/// either (a held file ends the run: one request, no gap fetched again).
/// Unchanged when window is 0, no extent holds `offset`, or the span ends
/// before that file does (a file past max_file_fetch).
chunk_span neighbour_span(const std::vector<layers::blob_extent>& extents, chunk_span span,
                          uint64_t offset, uint64_t chunk_size, uint64_t window,
                          const std::function<bool(uint64_t)>& missing);

/// Recent read streams of the blobs of one daemon, to decide readahead.
class stream_table {
 public:
  explicit stream_table(size_t slots = 64) : slots_(slots) {}

  /// Notes a read of [offset, offset+len) of `blob` and returns how many
  /// bytes after it to read ahead: 0 unless the read continues a stream
  /// (starts where an earlier read ended) and has read 2 x
  /// policy.readahead_min bytes, else the stream's length so far clamped to
  /// [policy.readahead_min, policy.readahead_max].
  uint64_t note_read(const std::string& blob, uint64_t offset, uint64_t len,
                     const fetch_policy& policy);

 private:
  struct stream {
    std::string blob;
    uint64_t end = 0;
    uint64_t length = 0;
    uint64_t used = 0;  ///< last use, for replacing the oldest
  };
  size_t slots_;
  std::mutex mu_;
  std::vector<stream> streams_;
  uint64_t clock_ = 0;
};

} // namespace dsec::lazyfs
