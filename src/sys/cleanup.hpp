// cleanup_stack: every acquisition registers its undo at once; on failure the
// undos run in reverse order, on success the caller commits and they are
// dropped (or handed over to the object that now owns the resources).
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace dsec::sys {

/// A LIFO stack of undo actions that runs unless committed.
class cleanup_stack {
 public:
  cleanup_stack() = default;
  cleanup_stack(const cleanup_stack&) = delete;
  cleanup_stack& operator=(const cleanup_stack&) = delete;
  cleanup_stack(cleanup_stack&& other) noexcept : undo_(std::move(other.undo_)) {
    other.undo_.clear();
  }
  ~cleanup_stack() { run(); }

  /// Registers `f` to run on failure, after every undo pushed later.
  void push(std::function<void()> f) { undo_.push_back(std::move(f)); }

  /// Drops every undo: the resources now belong to someone else.
  void commit() { undo_.clear(); }

  /// Runs every undo now, newest first.
  void run() {
    while (!undo_.empty()) {
      auto f = std::move(undo_.back());
      undo_.pop_back();
      if (f)
        f();
    }
  }

  /// Moves the pending undos out (to run later, e.g. at destroy), newest last.
  std::vector<std::function<void()>> take() { return std::exchange(undo_, {}); }

  [[nodiscard]] bool empty() const { return undo_.empty(); }

 private:
  std::vector<std::function<void()>> undo_;
};

} // namespace dsec::sys
