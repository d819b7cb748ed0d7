// An in-memory network for tests and simulation: endpoints are addresses,
// sends become in-flight deliveries in a time-ordered queue, and the owner (the
// simulation's event loop) pops them when the simulated clock reaches them.
// Faults are configurable: random datagram loss, latency with jitter, cut links
// (partitions), and stalled endpoints whose deliveries wait until the stall ends.
// Streams are never randomly lost (they model TCP) but do not cross cuts.
#pragma once

#include "gossip/transport.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace dsec::gossip {

/// Fault and delay model of the in-memory network.
struct network_config {
  /// One-way delay of every message.
  time_ms latency{1};
  /// Extra uniform random delay in [0, jitter].
  time_ms jitter{0};
  /// Probability that a datagram is dropped.
  double loss = 0;
};

/// One message on its way.
struct delivery {
  time_ms at{0};
  uint64_t order = 0;
  std::string from;
  std::string to;
  bytes data;
  bool stream = false;
};

/// The simulated network shared by all in-process nodes.
class memory_network {
 public:
  memory_network(network_config cfg, uint64_t seed);
  ~memory_network();

  /// The transport a node at `address` sends through. Owned by the network.
  transport& endpoint(const std::string& address);

  /// The current simulated time, advanced by the owner of the event loop.
  time_ms now() const { return now_; }
  void set_now(time_ms t) { now_ = t; }

  network_config& cfg() { return cfg_; }

  /// Drops messages between a and b, both ways, until heal().
  void cut(const std::string& a, const std::string& b);
  void heal(const std::string& a, const std::string& b);
  /// Drops everything to and from `address` (a dead host) until revive().
  void kill(const std::string& address);
  void revive(const std::string& address);
  bool is_dead(const std::string& address) const { return dead_.count(address) > 0; }
  /// Holds deliveries to `address` until `until` (a paused process whose
  /// socket buffer keeps filling).
  void stall(const std::string& address, time_ms until);
  /// End of the stall of `address`, or 0 when not stalled.
  time_ms stalled_until(const std::string& address) const;

  /// Time of the next delivery, if any.
  bool next_time(time_ms& t) const;
  /// Removes and returns the next delivery (check next_time first). Deliveries
  /// to a stalled endpoint are re-queued at the stall's end and not returned.
  bool pop(delivery& out);

  /// Messages accepted for delivery, and datagrams dropped by loss or faults.
  uint64_t sent() const { return sent_; }
  uint64_t dropped() const { return dropped_; }

 private:
  class endpoint_impl;
  friend class endpoint_impl;

  void send(const std::string& from, const std::string& to, bytes data, bool stream);
  bool blocked(const std::string& a, const std::string& b) const;

  struct later {
    bool operator()(const delivery& a, const delivery& b) const {
      return a.at != b.at ? a.at > b.at : a.order > b.order;
    }
  };

  network_config cfg_;
  std::mt19937_64 rng_;
  time_ms now_{0};
  uint64_t order_ = 0;
  uint64_t sent_ = 0;
  uint64_t dropped_ = 0;
  std::map<std::string, std::unique_ptr<endpoint_impl>> endpoints_;
  std::set<std::pair<std::string, std::string>> cuts_;
  std::set<std::string> dead_;
  std::map<std::string, time_ms> stalls_;
  std::priority_queue<delivery, std::vector<delivery>, later> queue_;
};

} // namespace dsec::gossip
