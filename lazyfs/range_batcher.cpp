// Group commit of range requests per blob (see range_batcher.hpp).
#include "lazyfs/range_batcher.hpp"

#include <algorithm>
#include <numeric>

namespace dsec::lazyfs {

std::vector<registry::byte_range> union_ranges(const std::vector<registry::byte_range>& in,
                                               std::vector<size_t>& of) {
  std::vector<size_t> order(in.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return in[a].offset < in[b].offset; });
  std::vector<registry::byte_range> out;
  std::vector<uint64_t> ends;
  of.assign(in.size(), 0);
  for (size_t i : order) {
    const uint64_t end = in[i].offset + in[i].len;
    if (!out.empty() && in[i].offset <= ends.back()) {
      ends.back() = std::max(ends.back(), end);
      out.back().len = uint32_t(ends.back() - out.back().offset);
    } else {
      out.push_back(in[i]);
      ends.push_back(end);
    }
    of[i] = out.size() - 1;
  }
  return out;
}

range_batcher::range_batcher(std::shared_ptr<range_fetcher> inner, size_t max_ranges,
                             uint64_t max_bytes)
  : inner_(std::move(inner)), max_ranges_(std::max<size_t>(1, max_ranges)),
    max_bytes_(max_bytes) {
}

std::string range_batcher::key(const registry::blob_source& src) {
  return src.registry + "/" + src.repository + "@" + src.digest;
}

size_t range_batcher::queued(const registry::blob_source& src) {
  std::lock_guard<std::mutex> guard{mu_};
  auto it = lanes_.find(key(src));
  return it == lanes_.end() ? 0 : it->second.queue.size();
}

expected<std::string> range_batcher::fetch(const registry::blob_source& src, uint64_t offset,
                                           uint32_t len) {
  auto mine = std::make_shared<pending>();
  mine->offset = offset;
  mine->len = len;
  const auto k = key(src);
  std::unique_lock<std::mutex> lk{mu_};
  auto& ln = lanes_[k];  // stays while `mine` is queued or in flight
  ln.queue.push_back(mine);
  while (!mine->done) {
    if (ln.busy || mine->taken) {
      cv_.wait(lk);
      continue;
    }
    // Nothing in flight: send this fetch and whatever queued with it.
    std::vector<std::shared_ptr<pending>> batch{mine};
    uint64_t bytes = mine->len;
    ln.queue.erase(std::find(ln.queue.begin(), ln.queue.end(), mine));
    for (auto it = ln.queue.begin(); it != ln.queue.end() && batch.size() < max_ranges_;) {
      if (bytes + (*it)->len > max_bytes_) {
        ++it;
        continue;
      }
      bytes += (*it)->len;
      batch.push_back(*it);
      it = ln.queue.erase(it);
    }
    for (auto& p : batch)
      p->taken = true;
    ln.busy = true;
    lk.unlock();
    send(src, batch);
    lk.lock();
    for (auto& p : batch)
      p->done = true;
    ln.busy = false;
    cv_.notify_all();
  }
  auto result = std::move(mine->result);
  if (auto it = lanes_.find(k); it != lanes_.end() && !it->second.busy && it->second.queue.empty())
    lanes_.erase(it);
  return result;
}

void range_batcher::send(const registry::blob_source& src,
                         const std::vector<std::shared_ptr<pending>>& batch) {
  requests_.fetch_add(1);
  ranges_.fetch_add(batch.size());
  if (batch.size() == 1) {
    batch[0]->result = inner_->fetch(src, batch[0]->offset, batch[0]->len);
    return;
  }
  std::vector<registry::byte_range> want;
  for (const auto& p : batch)
    want.push_back({p->offset, p->len});
  std::vector<size_t> of;
  auto unions = union_ranges(want, of);
  auto got = unions.size() == 1
               ? [&]() -> expected<std::vector<std::string>> {
                   auto one = inner_->fetch(src, unions[0].offset, unions[0].len);
                   if (!one)
                     return one.err();
                   return std::vector<std::string>{std::move(*one)};
                 }()
               : inner_->fetch_ranges(src, unions);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!got) {
      batch[i]->result = got.err();
      continue;
    }
    const auto& u = unions[of[i]];
    const auto& data = (*got)[of[i]];
    auto from = size_t(batch[i]->offset - u.offset);
    batch[i]->result = from >= data.size() ? std::string()
                                           : data.substr(from, std::min<size_t>(batch[i]->len,
                                                                                data.size() - from));
  }
}

} // namespace dsec::lazyfs
