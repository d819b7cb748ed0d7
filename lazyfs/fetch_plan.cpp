// Range request planning for lazy reads (see fetch_plan.hpp).
#include "lazyfs/fetch_plan.hpp"

#include <algorithm>

namespace dsec::lazyfs {

std::vector<chunk_span> plan_spans(uint64_t first, const std::vector<bool>& missing,
                                   uint64_t chunk_size, uint64_t max_gap) {
  std::vector<chunk_span> out;
  const uint64_t gap_chunks = chunk_size == 0 ? 0 : max_gap / chunk_size;
  size_t i = 0;
  while (i < missing.size()) {
    if (!missing[i]) {
      ++i;
      continue;
    }
    size_t end = i;  // last missing chunk of this span
    size_t j = i + 1;
    while (j < missing.size()) {
      if (missing[j]) {
        end = j++;
        continue;
      }
      // A run of held chunks: join across it if it is short and another
      // missing chunk follows.
      size_t k = j;
      while (k < missing.size() && !missing[k])
        ++k;
      if (k == missing.size() || k - j > gap_chunks)
        break;
      j = k;
    }
    out.push_back({first + i, first + end});
    i = end + 1;
  }
  return out;
}

chunk_span whole_file_span(const std::vector<layers::blob_extent>& extents, uint64_t offset,
                           uint64_t len, uint64_t chunk_size, uint64_t blob_size,
                           uint64_t max_file_fetch) {
  uint64_t lo = offset, hi = offset + std::max<uint64_t>(len, 1);
  if (max_file_fetch > 0)
    if (const auto* e = layers::extent_at(extents, offset)) {
      if (e->end - e->start <= max_file_fetch)
        lo = std::min(lo, e->start), hi = std::max(hi, e->end);
      else
        hi = std::max(hi, std::min(e->end, offset + max_file_fetch));
    }
  hi = std::max(std::min(hi, blob_size), lo + 1);
  if (chunk_size == 0)
    return {0, 0};
  return {lo / chunk_size, (hi - 1) / chunk_size};
}

chunk_span neighbour_span(const std::vector<layers::blob_extent>& extents, chunk_span span,
                          uint64_t offset, uint64_t chunk_size, uint64_t window,
                          const std::function<bool(uint64_t)>& missing) {
  if (window == 0 || chunk_size == 0)
    return span;
  const uint64_t lo = span.first * chunk_size, end = (span.last + 1) * chunk_size;
  const auto* own = layers::extent_at(extents, offset);
  if (!own || own->end > end)
    return span;
  // Extents are sorted and disjoint, so their ends are sorted too: the first
  // one ending past the span is the next file (it may start in its last chunk).
  auto it = std::upper_bound(extents.begin(), extents.end(), end,
                             [](uint64_t off, const layers::blob_extent& e) { return off < e.end; });
  for (; it != extents.end(); ++it) {
    const uint64_t last = (it->end - 1) / chunk_size;
    if ((last + 1) * chunk_size - lo > window)
      break;
    for (uint64_t i = span.last + 1; i <= last; ++i)
      if (!missing(i))
        return span;
    span.last = last;
  }
  return span;
}

uint64_t stream_table::note_read(const std::string& blob, uint64_t offset, uint64_t len,
                                 const fetch_policy& policy) {
  std::lock_guard<std::mutex> guard{mu_};
  ++clock_;
  for (auto& s : streams_) {
    if (s.blob == blob && s.end == offset) {
      s.end = offset + len;
      s.length += len;
      s.used = clock_;
      // Only a stream that has read twice the least readahead reads ahead:
      // the kernel's own 128 KiB readahead on the FUSE file makes a short
      // stream of every small file, and those must not fetch more.
      if (policy.readahead_max == 0 || s.length < 2 * policy.readahead_min)
        return 0;
      return std::clamp<uint64_t>(s.length, policy.readahead_min, policy.readahead_max);
    }
  }
  stream fresh{blob, offset + len, len, clock_};
  if (streams_.size() < slots_) {
    streams_.push_back(std::move(fresh));
  } else {
    auto oldest = std::min_element(streams_.begin(), streams_.end(),
                                   [](const stream& a, const stream& b) { return a.used < b.used; });
    *oldest = std::move(fresh);
  }
  return 0;
}

} // namespace dsec::lazyfs
