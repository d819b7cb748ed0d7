// uring_file: a small positional file writer over io_uring (liburing 2.3),
// for layer blobs arriving from peers in chunks. Each write_at() queues one
// pwrite SQE at its offset and returns once it is submitted (waiting only when
// the ring is full); chunks may arrive out of order and from several threads.
// finish() waits until the expected number of bytes has been queued and
// written, then fsyncs, so the image is on disk before the store renames it
// into blobs/ under its digest.
//
// Short writes (possible on any pwrite) are resubmitted for the remainder.
// The first failure sticks: later calls return it, and finish() reports it
// after every queued write has completed (the kernel may still read the
// buffers until then, so none is freed early).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.hpp"

namespace dsec::layers {

/// Writes one new file at offsets through io_uring. Thread-safe; movable.
class uring_writer {
 public:
  // -- constructors -----------------------------------------------------------

  /// Creates `path` (O_EXCL: never overwrites) with mode 0644 and sets up a
  /// ring of `depth` entries (how many writes may be in flight at once).
  /// Errors name the path or the io_uring setup and errno.
  static expected<uring_writer> create(const std::string& path, unsigned depth = 16);

  uring_writer(uring_writer&&) noexcept;
  uring_writer& operator=(uring_writer&&) noexcept;
  /// Waits for writes still in flight (their buffers must outlive them),
  /// closes the file; does not delete it.
  ~uring_writer();

  // -- writing ----------------------------------------------------------------

  /// Queues `data` for writing at `offset`; the writer owns the buffer until
  /// the write completes. Blocks only while the ring is full.
  status write_at(uint64_t offset, std::string data);

  /// Waits until `total_bytes` have been queued (by any thread; at most
  /// `wait_ms` for stragglers) and written, then fsyncs the file. Returns the
  /// first error of any write, or timeout.
  status finish(uint64_t total_bytes, int64_t wait_ms = 60000);

  /// Bytes whose writes completed so far.
  uint64_t written() const;

  /// The file's path as given.
  const std::string& path() const;

 private:
  struct impl;
  explicit uring_writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace dsec::layers
