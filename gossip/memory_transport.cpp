// The in-memory network: endpoints, fault injection, the delivery queue.
#include "gossip/memory_transport.hpp"

namespace dsec::gossip {

/// A node's view of the network: stamps its own address on what it sends.
class memory_network::endpoint_impl : public transport {
 public:
  endpoint_impl(memory_network& net, std::string address)
      : net_(net), address_(std::move(address)) {}

  void send_packet(const std::string& to, bytes data) override {
    net_.send(address_, to, std::move(data), false);
  }

  void send_stream(const std::string& to, bytes data) override {
    net_.send(address_, to, std::move(data), true);
  }

 private:
  memory_network& net_;
  std::string address_;
};

memory_network::memory_network(network_config cfg, uint64_t seed) : cfg_(cfg), rng_(seed) {}

memory_network::~memory_network() = default;

transport& memory_network::endpoint(const std::string& address) {
  auto& ep = endpoints_[address];
  if (!ep)
    ep = std::make_unique<endpoint_impl>(*this, address);
  return *ep;
}

void memory_network::cut(const std::string& a, const std::string& b) {
  cuts_.insert({a, b});
  cuts_.insert({b, a});
}

void memory_network::heal(const std::string& a, const std::string& b) {
  cuts_.erase({a, b});
  cuts_.erase({b, a});
}

void memory_network::kill(const std::string& address) { dead_.insert(address); }
void memory_network::revive(const std::string& address) { dead_.erase(address); }

void memory_network::stall(const std::string& address, time_ms until) {
  stalls_[address] = until;
}

time_ms memory_network::stalled_until(const std::string& address) const {
  auto it = stalls_.find(address);
  return it == stalls_.end() || it->second <= now_ ? time_ms{0} : it->second;
}

bool memory_network::blocked(const std::string& a, const std::string& b) const {
  return dead_.count(a) || dead_.count(b) || cuts_.count({a, b});
}

void memory_network::send(const std::string& from, const std::string& to, bytes data,
                          bool stream) {
  if (blocked(from, to)) {
    ++dropped_;
    return;
  }
  if (!stream && cfg_.loss > 0
      && std::uniform_real_distribution<double>(0, 1)(rng_) < cfg_.loss) {
    ++dropped_;
    return;
  }
  time_ms delay = cfg_.latency;
  if (cfg_.jitter.count() > 0)
    delay += time_ms{static_cast<int64_t>(rng_() % static_cast<uint64_t>(cfg_.jitter.count() + 1))};
  ++sent_;
  queue_.push(delivery{now_ + delay, order_++, from, to, std::move(data), stream});
}

bool memory_network::next_time(time_ms& t) const {
  if (queue_.empty())
    return false;
  t = queue_.top().at;
  return true;
}

bool memory_network::pop(delivery& out) {
  if (queue_.empty())
    return false;
  // top() is const only to protect the heap order, which depends on `at` and
  // `order` alone; moving the payload out before pop() leaves both intact.
  delivery d = std::move(const_cast<delivery&>(queue_.top()));
  queue_.pop();
  if (blocked(d.from, d.to)) {
    ++dropped_;
    return false;
  }
  time_ms until = stalled_until(d.to);
  if (until > d.at) {
    d.at = until;
    d.order = order_++;
    queue_.push(std::move(d));
    return false;
  }
  out = std::move(d);
  return true;
}

} // namespace dsec::gossip
