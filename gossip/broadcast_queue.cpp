// The invalidating, transmit-limited broadcast queue.
#include "gossip/broadcast_queue.hpp"

#include <cmath>

namespace dsec::gossip {

size_t retransmit_limit(size_t retransmit_mult, size_t n) {
  auto scale = static_cast<size_t>(std::ceil(std::log10(static_cast<double>(n) + 1.0)));
  return retransmit_mult * scale;
}

broadcast_queue::subject broadcast_queue::subject_of(broadcast_kind kind,
                                                     const std::string& id) {
  subject s;
  s.reserve(id.size() + 1);
  s.push_back(static_cast<char>(kind));
  s += id;
  return s;
}

void broadcast_queue::push(broadcast_kind kind, const std::string& id, bytes frame) {
  subject about = subject_of(kind, id);
  auto [it, fresh] = by_subject_.try_emplace(about);
  if (!fresh)
    order_.erase(it->second->key());
  entry e{std::move(about), std::move(frame), 0, next_serial_++, kind};
  auto key = e.key();
  it->second = &order_.emplace(key, std::move(e)).first->second;
}

std::vector<bytes> broadcast_queue::take(size_t budget, size_t limit, size_t load_limit) {
  std::vector<bytes> out;
  std::vector<decltype(order_)::node_type> sent;
  // Skipping is bounded so a nearly full packet does not scan a long queue.
  size_t skipped = 0;
  for (auto it = order_.begin(); it != order_.end() && budget > 0 && skipped < 32;) {
    if (it->second.frame.size() > budget) {
      ++it, ++skipped;
      continue;
    }
    budget -= it->second.frame.size();
    auto next = std::next(it);
    sent.push_back(order_.extract(it));
    it = next;
  }
  // Re-insert after the scan so an entry is never sent twice in one packet.
  for (auto& node : sent) {
    entry& e = node.mapped();
    out.push_back(e.frame);
    if (++e.transmits >= (e.kind == broadcast_kind::load ? load_limit : limit)) {
      by_subject_.erase(e.about);
      continue;
    }
    node.key() = e.key();
    order_.insert(std::move(node));
  }
  return out;
}

bool broadcast_queue::contains(broadcast_kind kind, const std::string& id) const {
  return by_subject_.count(subject_of(kind, id)) > 0;
}

int broadcast_queue::transmits(broadcast_kind kind, const std::string& id) const {
  auto it = by_subject_.find(subject_of(kind, id));
  if (it == by_subject_.end())
    return -1;
  return static_cast<int>(it->second->transmits);
}

void broadcast_queue::clear() {
  order_.clear();
  by_subject_.clear();
}

} // namespace dsec::gossip
