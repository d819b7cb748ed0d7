// The node-wide kept-output budget (see output_budget.hpp).
#include "core/output_budget.hpp"

#include <malloc.h>

#include <algorithm>
#include <thread>

namespace dsec {

namespace {

/// Released bytes that make the budget trim the allocator: a few big
/// buffers' worth, so a node that frees a 16 MiB record trims about once
/// per record and one that frees small ones rarely.
constexpr uint64_t trim_after = 16u << 20;

/// A trim runs (process-wide: malloc_trim is).
std::atomic<bool> trimming{false};

} // namespace

output_budget& output_budget::node() {
  static output_budget b;
  return b;
}

bool output_budget::try_take(uint64_t n) {
  auto lim = limit_.load();
  auto cur = used_.load();
  do {
    if (lim != 0 && cur + n > lim)
      return false;
  } while (!used_.compare_exchange_weak(cur, cur + n));
  auto now = cur + n;
  for (auto p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {
  }
  return true;
}

void output_budget::take(uint64_t n) {
  auto now = used_ += n;
  for (auto p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {
  }
}

void output_budget::give_back(uint64_t n) {
  used_ -= std::min<uint64_t>(n, used_.load());
  if ((freed_since_trim_ += n) < trim_after)
    return;
  freed_since_trim_ = 0;
  if (trimming.exchange(true))
    return; // one trim at a time; the next release starts another
  // malloc_trim walks every arena (milliseconds on a big heap): never on
  // the caller's thread, which may be an actor's.
  std::thread([] {
    ::malloc_trim(0);
    trimming = false;
  }).detach();
}

std::string output_budget::metrics_text(const std::string& node_id) const {
  std::string out;
  auto add = [&](const char* name, const char* type, const char* help, uint64_t v) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string{name} + "{node=\"" + node_id + "\"} " + std::to_string(v) + "\n";
  };
  add("dsec_output_budget_bytes", "gauge",
      "Node-wide budget for kept command output (--output-budget-mb; 0 = none).", limit());
  add("dsec_output_kept_bytes", "gauge", "Command output the node keeps now, all sandboxes.",
      used());
  add("dsec_output_kept_peak_bytes", "gauge", "The most command output the node kept at once.",
      peak());
  add("dsec_output_dropped_bytes_total", "counter",
      "Oldest output bytes dropped to stay under the output budget.", dropped());
  return out;
}

output_charge& output_charge::operator=(output_charge&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = o.budget_;
    bytes_ = o.bytes_;
    dropped_ = o.dropped_;
    o.bytes_ = 0;
  }
  return *this;
}

uint64_t output_charge::grow(uint64_t held, uint64_t n) {
  if (!budget_ || n == 0)
    return 0;
  if (budget_->try_take(n)) {
    bytes_ += n;
    return 0;
  }
  // Full: the holder rolls. It drops at least what comes in (so it does not
  // grow) and a quarter of what it holds (so it moves its buffer rarely),
  // but never below its newest `floor` bytes.
  uint64_t total = held + n;
  uint64_t drop = std::min(held, std::max(n, held / 4));
  drop = std::min(drop, total - std::min(total, output_budget::floor));
  if (n > drop) {
    budget_->take(n - drop);
    bytes_ += n - drop;
  } else {
    auto back = std::min(drop - n, bytes_);
    budget_->give_back(back);
    bytes_ -= back;
  }
  dropped_ += drop;
  budget_->count_dropped(drop);
  return drop;
}

void output_charge::shrink(uint64_t n) {
  n = std::min(n, bytes_);
  bytes_ -= n;
  if (budget_)
    budget_->give_back(n);
}

void output_charge::release() {
  shrink(bytes_);
}

std::string dropped_marker(uint64_t n) {
  return "[dsec: " + std::to_string(n) + " bytes of earlier output dropped (node output budget)]\n";
}

int64_t kept_stream::append(std::string& kept, std::string_view data, output_charge& charge) {
  auto drop = charge.grow(kept.size() - marker, data.size());
  if (drop == 0) {
    kept += data;
    return 0;
  }
  auto before = kept.size();
  drop = std::min<uint64_t>(drop, kept.size() - marker);
  dropped += drop;
  auto m = dropped_marker(dropped);
  // A fresh buffer of the size kept: the old one is freed, not kept around.
  std::string next;
  next.reserve(m.size() + (kept.size() - marker - drop) + data.size());
  next += m;
  next.append(kept, marker + drop, std::string::npos);
  next += data;
  marker = m.size();
  kept.swap(next);
  return int64_t(before + data.size()) - int64_t(kept.size());
}

void return_big_buffers_at_once() {
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
}

} // namespace dsec
