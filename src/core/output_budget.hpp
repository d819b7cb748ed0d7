// The node-wide budget for kept output (issue 29 part 4). Every byte of a
// command's output that the node keeps for a later reader (a background
// command's record, running or finished; a plain exec's result until it is
// answered) is taken from ONE budget per node process (--output-budget-mb).
//
// The rule when the budget is full: drop the oldest. A holder that gets more
// output keeps its newest bytes by dropping its OWN oldest ones (never a
// neighbour's), at least a quarter of what it holds at a time so a rolling
// holder does not move its buffer for every chunk. Below `floor` bytes a
// holder keeps everything even past the budget, so a quiet sandbox's command
// still shows its last lines while a noisy one filled the node: the bound is
// the budget plus `floor` per holder with output. A reader sees how many
// bytes were dropped in a marker line that the cut stream begins with
// (dropped_marker), and `truncated`.
//
// Memory goes back to the system when holders go: the budget counts what is
// released and calls malloc_trim once 16 MiB were freed (off the caller's
// thread), and return_big_buffers_at_once() makes the allocator hand big
// buffers back at free instead of keeping them in its arenas.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsec {

/// The node's kept-output budget; thread-safe (atomics only).
class output_budget {
public:
  /// 256 MiB: the 3-4 biggest outputs a node keeps whole (16 MiB per stream
  /// per command) next to thousands of small ones; too small drops the
  /// start of long outputs sooner, too large lets `yes` in a few sandboxes
  /// take memory the sandboxes themselves were admitted for.
  static constexpr uint64_t default_limit = 256u << 20;
  /// What a holder keeps past the budget: the last screenfuls of a command.
  static constexpr uint64_t floor = 64u << 10;

  /// The node process's one budget.
  static output_budget& node();

  // -- configuration ---------------------------------------------------------

  /// Bytes of kept output allowed in all; 0 = no bound.
  void set_limit(uint64_t bytes) { limit_ = bytes; }
  [[nodiscard]] uint64_t limit() const { return limit_; }

  // -- accounting ------------------------------------------------------------

  /// Bytes held now (may pass the limit by the holders' floors).
  [[nodiscard]] uint64_t used() const { return used_; }
  /// The most ever held at once.
  [[nodiscard]] uint64_t peak() const { return peak_; }
  /// Output bytes dropped to stay under the budget, ever.
  [[nodiscard]] uint64_t dropped() const { return dropped_; }

  /// Takes `n` bytes if they fit under the limit; false (nothing taken) if not.
  [[nodiscard]] bool try_take(uint64_t n);
  /// Takes `n` bytes even past the limit.
  void take(uint64_t n);
  /// Gives `n` bytes back; trims the allocator after large releases.
  void give_back(uint64_t n);
  void count_dropped(uint64_t n) { dropped_ += n; }

  /// Prometheus text: the limit, what is held, the peak, the drops.
  [[nodiscard]] std::string metrics_text(const std::string& node_id) const;

private:
  std::atomic<uint64_t> limit_{default_limit};
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> peak_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> freed_since_trim_{0};
};

/// What one holder (one command's kept output) took from a budget; given
/// back when it is destroyed. Move-only. A null budget counts nothing.
class output_charge {
public:
  output_charge() = default;
  explicit output_charge(output_budget* b) : budget_(b) {}
  output_charge(output_charge&& o) noexcept
    : budget_(o.budget_), bytes_(o.bytes_), dropped_(o.dropped_) {
    o.bytes_ = 0;
  }
  output_charge& operator=(output_charge&& o) noexcept;
  output_charge(const output_charge&) = delete;
  output_charge& operator=(const output_charge&) = delete;
  ~output_charge() { release(); }

  /// The holder keeps `held` bytes of the stream that gets `n` more: takes
  /// `n` from the budget and answers how many of that stream's oldest bytes
  /// the holder must drop first (0 when the budget had room). The drop is
  /// already accounted (given back, counted as dropped).
  [[nodiscard]] uint64_t grow(uint64_t held, uint64_t n);
  /// The holder dropped `n` bytes by itself (e.g. a record forgotten).
  void shrink(uint64_t n);
  /// Gives everything back.
  void release();
  [[nodiscard]] uint64_t bytes() const { return bytes_; }
  /// Bytes this holder dropped to stay under the budget.
  [[nodiscard]] uint64_t dropped() const { return dropped_; }

private:
  output_budget* budget_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

/// The first line of a kept stream whose oldest bytes were dropped:
/// "[dsec: N bytes of earlier output dropped (node output budget)]\n".
[[nodiscard]] std::string dropped_marker(uint64_t n);

/// One kept stream of a command under the budget: the marker it begins
/// with once its head was dropped, and how much was dropped.
struct kept_stream {
  /// Bytes of `dropped_marker` at the start of the stream (0: none).
  size_t marker = 0;
  /// Bytes of this stream dropped so far.
  uint64_t dropped = 0;

  /// Appends `data` to `kept` (this stream's text) under `charge`: when the
  /// budget is full, drops the oldest bytes first and puts the marker
  /// first. Answers how many bytes `kept` lost at its front (its marker
  /// counted: negative when only the marker grew), for callers that index
  /// the stream, e.g. its runs of interleaved output.
  int64_t append(std::string& kept, std::string_view data, output_charge& charge);
};

/// Makes glibc's malloc return buffers of 256 KiB and more to the system at
/// free (a fixed mmap threshold instead of the adaptive one, which grows to
/// 32 MiB after the first big free and then keeps such buffers in arenas:
/// the node's RSS stayed ~226 MB after a sandbox with three `yes` was gone).
void return_big_buffers_at_once();

} // namespace dsec
