// dsec-gossip-sim: runs the in-memory gossip network (gossip/simulation.hpp) for
// growing cluster sizes and prints one JSON document: time and gossip rounds to
// converge after everyone joins at once, time until every node marks a killed
// node dead, packets and bytes per node per second in steady state, and false
// deaths (plus suspicions) at 1% and 5% datagram loss.
//
//   dsec-gossip-sim [--sizes=10,30,100,300,1000] [--big] [--loss-seconds=S]
//                   [--load-interval-ms=MS] [--seed=1]
//   dsec-gossip-sim --scale-unit [--nodes=160] [--per-node=3200] [--rate=5000]
//                   [--k=2] [--spread=ring|sample] [--churn-seconds=30]
//                   [--loss-seconds=S] [--seed=1]
//
// --scale-unit runs DSec's scale unit instead (bench/gossip/scale_unit.hpp): the
// real placement policy over each node's gossip view, a burst of creates that
// fills the cluster, churn with a kill and joins, then loss.
//
// Every node must hear every node's load, so load traffic grows as N^2 / interval.
// By default the interval is max(2 s, N * 20 ms), which keeps the cluster-wide
// report rate at <= 50/s (what an actor should do too), and loss runs last 60 s
// up to N=100, 20 s at 300 and 10 s beyond, to keep the default run near two minutes.
//
// --big adds N=10000 (memory grows as N^2 member records: ~25 GB, so it is off
// by default and only sensible on a large machine).
#include "bench/gossip/scale_unit.hpp"
#include "gossip/simulation.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace dsec::gossip;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

struct options {
  std::vector<size_t> sizes{10, 30, 100, 300, 1000};
  /// 0 = auto (see the file comment).
  time_ms loss_duration{0};
  time_ms load_interval{0};
  uint64_t seed = 1;
  bool scale_unit = false;
  dsec::scale::options scale;
};

bool flag(const char* arg, const char* name, std::string& value) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=')
    return false;
  value = arg + n + 1;
  return true;
}

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (std::strcmp(argv[i], "--big") == 0) {
      o.sizes.push_back(10000);
    } else if (flag(argv[i], "--sizes", v)) {
      o.sizes.clear();
      std::stringstream ss(v);
      for (std::string part; std::getline(ss, part, ',');)
        o.sizes.push_back(std::stoul(part));
    } else if (flag(argv[i], "--loss-seconds", v)) {
      o.loss_duration = std::chrono::seconds(std::stol(v));
    } else if (flag(argv[i], "--load-interval-ms", v)) {
      o.load_interval = time_ms(std::stol(v));
    } else if (flag(argv[i], "--seed", v)) {
      o.seed = std::stoull(v);
      o.scale.seed = o.seed;
    } else if (std::strcmp(argv[i], "--scale-unit") == 0) {
      o.scale_unit = true;
    } else if (flag(argv[i], "--nodes", v)) {
      o.scale.nodes = std::stoul(v);
    } else if (flag(argv[i], "--per-node", v)) {
      o.scale.per_node = std::stoul(v);
    } else if (flag(argv[i], "--capacity", v)) {
      o.scale.capacity = std::stoul(v);
    } else if (flag(argv[i], "--rate", v)) {
      o.scale.rate = std::stod(v);
    } else if (flag(argv[i], "--k", v)) {
      o.scale.policy.k = std::stoul(v);
    } else if (flag(argv[i], "--spread", v)) {
      using mode = dsec::placement::policy::spread_mode;
      if (v != "ring" && v != "sample") {
        std::cerr << "dsec-gossip-sim: --spread=" << v << ": expected ring or sample\n";
        return false;
      }
      o.scale.policy.spread = v == "ring" ? mode::ring : mode::sample;
    } else if (flag(argv[i], "--churn-seconds", v)) {
      o.scale.churn_s = std::stol(v);
    } else {
      std::cerr << "dsec-gossip-sim: unknown argument " << argv[i] << "\n";
      return false;
    }
  }
  return true;
}

time_ms load_interval(const options& o, size_t n) {
  if (o.load_interval.count() > 0)
    return o.load_interval;
  return std::max<time_ms>(2s, time_ms{static_cast<int64_t>(20 * n)});
}

time_ms loss_duration(const options& o, size_t n) {
  if (o.loss_duration.count() > 0)
    return o.loss_duration;
  return n <= 100 ? 60s : n <= 300 ? 20s : 10s;
}

sim_config make_config(const options& o, size_t n, double loss) {
  sim_config c;
  c.node.load_events = false;  // nobody reads them here
  c.seed = o.seed;
  c.net.latency = 1ms;
  c.net.jitter = 2ms;
  c.net.loss = loss;
  c.load_interval = load_interval(o, n);
  return c;
}

double seconds(time_ms t) { return static_cast<double>(t.count()) / 1000.0; }

/// Joins, steady-state traffic and failure detection on a loss-free network.
json run_clean(simulation& sim, size_t n) {
  sim.start_cluster(n);
  bool converged = sim.run_until([&] { return sim.all_see_all_alive(); }, 120s, 50ms);
  json out;
  out["converged"] = converged;
  out["converge_s"] = seconds(sim.now());
  out["converge_rounds"] = sim.now().count() / sim.node(0).cfg().gossip_interval.count();

  sim.run_for(5s);
  traffic_stats before = sim.total_traffic();
  time_ms window = 10s;
  sim.run_for(window);
  traffic_stats after = sim.total_traffic();
  double per = static_cast<double>(n) * seconds(window);
  out["packets_per_node_s"] = static_cast<double>(after.packets_sent - before.packets_sent) / per;
  out["packet_bytes_per_node_s"]
      = static_cast<double>(after.packet_bytes_sent - before.packet_bytes_sent) / per;
  out["stream_bytes_per_node_s"]
      = static_cast<double>(after.stream_bytes_sent - before.stream_bytes_sent) / per;

  size_t victim = n / 2;
  sim.kill(victim);
  time_ms start = sim.now();
  bool detected = sim.run_until(
      [&] { return sim.nodes_seeing(victim, member_state::dead) == sim.observers(victim); },
      120s, 50ms);
  out["failure_detected"] = detected;
  out["detect_all_dead_s"] = seconds(sim.now() - start);
  out["false_deaths"] = sim.counters().false_deaths;
  return out;
}

/// False deaths under datagram loss, on the cluster of run_clean (its killed
/// node stays dead), at each loss rate in turn; counters are per phase.
json run_lossy(const options& o, simulation& sim, const std::vector<double>& rates) {
  size_t n = sim.size();
  time_ms duration = loss_duration(o, n);
  json out = json::array();
  for (double loss : rates) {
    sim.net().cfg().loss = loss;
    sim_counters before = sim.counters();
    sim.run_for(duration);
    json phase;
    phase["loss"] = loss;
    phase["simulated_s"] = seconds(duration);
    phase["suspect_events"] = sim.counters().suspects - before.suspects;
    phase["false_deaths"] = sim.counters().false_deaths - before.false_deaths;
    out.push_back(phase);
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o))
    return 2;
  if (o.scale_unit) {
    if (o.loss_duration.count() > 0)
      o.scale.loss_s = o.loss_duration.count() / 1000;
    auto wall = std::chrono::steady_clock::now();
    json report = dsec::scale::run(o.scale);
    report["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    std::cout << report.dump(2) << "\n";
    return 0;
  }
  config defaults;
  json report;
  report["defaults"] = {
      {"probe_interval_ms", defaults.probe_interval.count()},
      {"probe_timeout_ms", defaults.probe_timeout.count()},
      {"indirect_checks", defaults.indirect_checks},
      {"suspicion_mult", defaults.suspicion_mult},
      {"suspicion_max_timeout_mult", defaults.suspicion_max_timeout_mult},
      {"gossip_interval_ms", defaults.gossip_interval.count()},
      {"gossip_fanout", defaults.gossip_fanout},
      {"retransmit_mult", defaults.retransmit_mult},
      {"push_pull_interval_ms", defaults.push_pull_interval.count()},
      {"latency_ms", "1 + U[0,2]"},
  };
  for (size_t n : o.sizes) {
    auto wall = std::chrono::steady_clock::now();
    simulation sim(make_config(o, n, 0));
    json row = run_clean(sim, n);
    row["n"] = n;
    row["load_interval_ms"] = load_interval(o, n).count();
    row["lossy"] = run_lossy(o, sim, {0.01, 0.05});
    row["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    std::cerr << "n=" << n << " done in " << row["wall_s"].get<double>() << " s\n";
    report["runs"].push_back(row);
  }
  std::cout << report.dump(2) << "\n";
  return 0;
}
