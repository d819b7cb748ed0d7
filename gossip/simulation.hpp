// A discrete-event simulation of N memberlist nodes on one memory_network: the
// event loop advances a simulated clock to the next network delivery or node
// wakeup, whichever is first, so minutes of cluster time run in seconds and
// every run with the same seed is identical. Tests and dsec-gossip-sim use it
// to start clusters, inject kills, stalls, loss and partitions, and to watch
// convergence and false deaths.
#pragma once

#include "gossip/memberlist.hpp"
#include "gossip/memory_transport.hpp"

#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

namespace dsec::gossip {

/// Shape of a simulated cluster.
struct sim_config {
  network_config net;
  /// Template for every node; id and address are filled in per node.
  config node;
  uint64_t seed = 1;
  /// Each node publishes a load report this often; 0 = never.
  time_ms load_interval{0};
};

/// What the simulation observed in the nodes' events.
struct sim_counters {
  uint64_t suspects = 0;
  uint64_t deaths = 0;
  /// `dead` events about a node that was neither killed nor had left.
  uint64_t false_deaths = 0;
};

/// N in-process nodes, a simulated network and a simulated clock.
class simulation {
 public:
  explicit simulation(sim_config cfg);
  ~simulation();

  /// Adds a node (alone, not joined); returns its index.
  size_t add_node();
  /// Adds n nodes; node 0 (or the first added) is the seed the others join.
  void start_cluster(size_t n);
  /// Node i joins through the given nodes.
  void join(size_t i, const std::vector<size_t>& seeds);

  /// Runs the event loop until the clock reaches `t`.
  void run_until(time_ms t);
  void run_for(time_ms d) { run_until(now_ + d); }
  /// Runs until `done()` holds (checked every `step`) or `limit` passes;
  /// true when it held. now() is then the first check time at which it held.
  bool run_until(const std::function<bool()>& done, time_ms limit, time_ms step);

  /// Kills node i: its host vanishes from the network, it never runs again.
  void kill(size_t i);
  /// Pauses node i for d: no ticks, deliveries to it wait until the end.
  void stall(size_t i, time_ms d);
  /// Node i leaves gracefully (it keeps running to spread the news).
  void leave(size_t i);

  // -- observation ---------------------------------------------------------------

  time_ms now() const { return now_; }
  size_t size() const { return nodes_.size(); }
  memberlist& node(size_t i) { return *nodes_[i]->list; }
  const std::string& id(size_t i) const { return nodes_[i]->id; }
  bool running(size_t i) const { return !nodes_[i]->killed; }
  memory_network& net() { return net_; }
  const sim_counters& counters() const { return counters_; }

  /// Every running node counts exactly the running, not-left nodes as alive.
  bool all_see_all_alive() const;
  /// Running nodes other than `target` that see `target` in state `s` (a
  /// reaped member counts as dead).
  size_t nodes_seeing(size_t target, member_state s) const;
  /// Running nodes other than `target`.
  size_t observers(size_t target) const;
  /// Packets and bytes sent by all nodes so far (datagrams and streams).
  traffic_stats total_traffic() const;

  /// Called with (node index, event) for every event any node emits.
  std::function<void(size_t, const event&)> on_event;

  /// What node i reports as its load at each load_interval; unset = random
  /// figures (membership-only runs). The scale-unit run (bench/gossip) sets
  /// it to its model of each node's sandboxes.
  std::function<load_report(size_t)> load_source;

 private:
  struct sim_node {
    std::string id;
    std::string address;
    std::unique_ptr<memberlist> list;
    bool killed = false;
    bool left = false;
    time_ms scheduled{0};
    time_ms next_load{0};
  };

  struct wakeup {
    time_ms at;
    size_t node;
    bool operator>(const wakeup& o) const { return at != o.at ? at > o.at : node > o.node; }
  };

  void schedule(size_t i);
  void wake(size_t i);
  void deliver(delivery& d);
  void drain(size_t i);
  void publish_load(size_t i);
  bool pop_stale_wakeups();

  sim_config cfg_;
  memory_network net_;
  std::mt19937_64 rng_;
  time_ms now_{0};
  std::vector<std::unique_ptr<sim_node>> nodes_;
  std::unordered_map<std::string, size_t> by_address_;
  std::unordered_map<std::string, size_t> by_id_;
  std::priority_queue<wakeup, std::vector<wakeup>, std::greater<wakeup>> wakeups_;
  sim_counters counters_;
  size_t running_ = 0;
};

} // namespace dsec::gossip
