// The scale-unit run (see scale_unit.hpp): an event queue of creates, hops,
// admissions and deletes, interleaved with the gossip simulation's own
// events by running the simulation up to each of ours.
#include "bench/gossip/scale_unit.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "gossip/member_view.hpp"
#include "gossip/simulation.hpp"
#include "policy/placement_ledger.hpp"
#include "policy/placement_ring.hpp"
#include "policy/reclaim_policy.hpp"

namespace dsec::scale {
namespace {

using gossip::time_ms;
using json = nlohmann::json;
using namespace std::chrono_literals;

/// The gossip actor's view push coalescing (actors/gossip_actor.cpp).
constexpr time_ms view_push_interval{250};
/// Cores of a modelled node: its CPU load is creates in progress per core.
constexpr double node_cores = 16;

double seconds(time_ms t) { return static_cast<double>(t.count()) / 1000.0; }

/// One modelled node: what its lifecycle holds and what its placement sees.
struct node_model {
  size_t resident = 0;
  size_t creating = 0;
  /// Creates admitted in the current sample window.
  size_t window_admits = 0;
  /// The 1-minute load average per core, as loadavg smooths it.
  double cpu_load = 0;
  time_ms cpu_at{0};
  bool dead = false;
  bool joined_late = false;
  /// The entry's view as the gossip actor last pushed it, and its ledger.
  std::vector<member_info> view;
  time_ms view_at{-1000000};
  placement::ledger placed;
  placement::ring_cursor ring;
  std::mt19937_64 rng;
};

/// One create walking its candidates.
struct create_walk {
  size_t entry = 0;
  std::vector<size_t> order;
  size_t next = 0;
  /// Attempts sent to nodes other than the entry (forwards).
  size_t forwards = 0;
  time_ms started{0};
};

enum class ev_kind { tick, attempt, admitted, refused };

struct ev {
  time_ms at;
  uint64_t seq;
  ev_kind kind;
  size_t create = 0;
  size_t node = 0;
  bool operator>(const ev& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

/// max / mean of `xs` over the nodes where `use` holds.
double max_over_mean(const std::vector<double>& xs) {
  if (xs.empty())
    return 0;
  double sum = 0, mx = 0;
  for (double x : xs) {
    sum += x;
    mx = std::max(mx, x);
  }
  return sum > 0 ? mx / (sum / static_cast<double>(xs.size())) : 0;
}

class scale_run {
 public:
  explicit scale_run(const options& o) : o_(o), sim_(sim_config(o)), rng_(o.seed * 31 + 7) {
    sim_.load_source = [this](size_t i) { return report(i); };
  }

  json run();

 private:
  static gossip::sim_config sim_config(const options& o) {
    gossip::sim_config c;
    c.node.load_events = false;
    if (o.suspicion_mult > 0)
      c.node.suspicion_mult = o.suspicion_mult;
    c.seed = o.seed;
    c.net.latency = 1ms;
    c.net.jitter = 2ms;
    // The gossip actor's load interval: max(1 s, N x 20 ms).
    c.load_interval = std::max<time_ms>(1s, time_ms{static_cast<int64_t>(20 * o.nodes)});
    return c;
  }

  gossip::load_report report(size_t i);
  size_t add_node(bool late);
  void push(time_ms at, ev_kind k, size_t create = 0, size_t node = 0) {
    events_.push({at, seq_++, k, create, node});
  }
  time_ms hop() { return time_ms{1 + static_cast<int64_t>(rng_() % 3)}; }
  void refresh_view(size_t entry);
  void start_create(size_t entry);
  void attempt(size_t c);
  void on_attempt(const ev& e);
  void delete_one();
  void on_tick();
  /// Records one window; `full` = a whole window at the phase's rate (the
  /// worst ratios count only those).
  json sample(time_ms window, bool full = true);
  /// Runs our events and the gossip's until `end`.
  void run_until(time_ms end);
  bool all_see(size_t target, gossip::member_state s) {
    return sim_.nodes_seeing(target, s) == sim_.observers(target);
  }
  json phase_counters(const char* name, time_ms length, const gossip::traffic_stats& before);

  options o_;
  gossip::simulation sim_;
  std::mt19937_64 rng_;
  std::vector<node_model> nodes_;
  std::unordered_map<std::string, size_t> by_id_;
  std::vector<create_walk> walks_;
  std::priority_queue<ev, std::vector<ev>, std::greater<ev>> events_;
  uint64_t seq_ = 0;
  /// Creates and deletes per tick (ms), with the fractions carried over.
  double create_rate_ = 0, delete_rate_ = 0, create_carry_ = 0, delete_carry_ = 0;
  size_t resident_total_ = 0;
  // Counters of the current phase.
  uint64_t started_ = 0, admitted_ = 0, refused_ = 0, dead_hits_ = 0;
  std::map<size_t, uint64_t> forwards_hist_;
  /// From a create's start to the node that admits it, per forwards taken:
  /// what a forward (and a refusal's retry) costs in placement latency.
  std::map<size_t, std::vector<double>> route_ms_;
  double worst_resident_ratio_ = 0, worst_window_ratio_ = 0;
  json series_ = json::array();
  sandbox_spec spec_;
};

gossip::load_report scale_run::report(size_t i) {
  auto& n = nodes_[i];
  gossip::load_report r;
  // What the lifecycle's admission still gives (node_status::memory_free_mb):
  // the room left under its limit, at the need of one sandbox each.
  int64_t need = reclaim::expected_need_mb(spec_.memory_mb, 0);
  int64_t room = static_cast<int64_t>(o_.capacity) - static_cast<int64_t>(n.resident + n.creating);
  r.free_memory_mb = static_cast<uint64_t>(std::max<int64_t>(0, room) * need);
  // loadavg: an exponential average over a minute of the running work, here
  // one core per create in progress.
  double decay = std::exp(-seconds(sim_.now() - n.cpu_at) / 60.0);
  n.cpu_load = n.cpu_load * decay + (1 - decay) * static_cast<double>(n.creating) / node_cores;
  n.cpu_at = sim_.now();
  r.cpu_load = std::min(1.0, n.cpu_load);
  r.sandboxes = static_cast<uint32_t>(n.resident);
  r.creating = static_cast<uint32_t>(n.creating);
  return r;
}

size_t scale_run::add_node(bool late) {
  nodes_.emplace_back();
  nodes_.back().joined_late = late;
  nodes_.back().rng.seed(o_.seed * 1000003 + nodes_.size());
  size_t i = sim_.add_node();
  by_id_[sim_.id(i)] = i;
  return i;
}

void scale_run::refresh_view(size_t entry) {
  auto& n = nodes_[entry];
  if (sim_.now() - n.view_at < view_push_interval)
    return;
  auto view = gossip::to_member_infos(sim_.node(entry).members());
  n.placed.on_view(n.view, view);
  n.view = std::move(view);
  n.view_at = sim_.now();
}

void scale_run::start_create(size_t entry) {
  refresh_view(entry);
  auto& n = nodes_[entry];
  create_walk w;
  w.entry = entry;
  w.started = sim_.now();
  // The placement actor's create path (handle_create without request_id).
  auto ids = placement::place(n.view, sim_.id(entry), spec_, n.placed, o_.policy, n.ring, n.rng);
  if (ids.size() > o_.policy.max_attempts)
    ids.resize(o_.policy.max_attempts);
  for (auto& id : ids)
    w.order.push_back(by_id_.at(id));
  ++started_;
  walks_.push_back(std::move(w));
  attempt(walks_.size() - 1);
}

void scale_run::attempt(size_t c) {
  auto& w = walks_[c];
  if (w.next >= w.order.size()) {
    ++refused_;
    ++forwards_hist_[w.forwards];
    return;
  }
  size_t target = w.order[w.next++];
  nodes_[w.entry].placed.sent(sim_.id(target));
  bool local = target == w.entry;
  if (!local)
    ++w.forwards;
  push(sim_.now() + (local ? 0ms : hop()), ev_kind::attempt, c, target);
}

void scale_run::on_attempt(const ev& e) {
  auto& n = nodes_[e.node];
  auto& w = walks_[e.create];
  bool local = e.node == w.entry;
  if (n.dead) { // connection refused: the entry moves on
    ++dead_hits_;
    push(sim_.now() + hop(), ev_kind::refused, e.create);
    return;
  }
  if (n.resident + n.creating >= o_.capacity) {
    push(sim_.now() + (local ? 0ms : hop()), ev_kind::refused, e.create);
    return;
  }
  ++n.creating;
  ++n.window_admits;
  route_ms_[w.forwards].push_back(static_cast<double>((sim_.now() - w.started).count()));
  auto t = o_.create_ms + static_cast<int64_t>(rng_() % (o_.create_jitter_ms + 1));
  push(sim_.now() + time_ms{t}, ev_kind::admitted, e.create, e.node);
}

void scale_run::delete_one() {
  if (resident_total_ == 0)
    return;
  auto pick = rng_() % resident_total_;
  for (auto& n : nodes_) {
    if (n.dead)
      continue;
    if (pick < n.resident) {
      --n.resident;
      --resident_total_;
      return;
    }
    pick -= n.resident;
  }
}

void scale_run::on_tick() {
  size_t alive = 0;
  for (auto& n : nodes_)
    alive += n.dead ? 0 : 1;
  create_carry_ += create_rate_ / 1000.0;
  for (; create_carry_ >= 1; create_carry_ -= 1) {
    size_t entry;
    do
      entry = rng_() % nodes_.size();
    while (nodes_[entry].dead);
    start_create(entry);
  }
  delete_carry_ += delete_rate_ / 1000.0;
  for (; delete_carry_ >= 1; delete_carry_ -= 1)
    delete_one();
  (void)alive;
}

json scale_run::sample(time_ms window, bool full) {
  std::vector<double> resident, admits;
  for (auto& n : nodes_) {
    if (n.dead)
      continue;
    resident.push_back(static_cast<double>(n.resident + n.creating));
    admits.push_back(static_cast<double>(n.window_admits));
    n.window_admits = 0;
  }
  double r = max_over_mean(resident), a = max_over_mean(admits);
  // The same figures had every create gone to a node picked at random (the
  // mean of 5 draws): what placement should beat.
  auto random_ratio = [&](const std::vector<double>& xs) {
    double sum = 0;
    for (double x : xs)
      sum += x;
    double mean = xs.empty() ? 0 : sum / static_cast<double>(xs.size());
    if (mean <= 0)
      return 0.0;
    std::poisson_distribution<int64_t> draw(mean);
    double total = 0;
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<double> ys(xs.size());
      for (auto& y : ys)
        y = static_cast<double>(draw(rng_));
      total += max_over_mean(ys);
    }
    return total / 5;
  };
  if (full) {
    worst_resident_ratio_ = std::max(worst_resident_ratio_, r);
    worst_window_ratio_ = std::max(worst_window_ratio_, a);
  }
  json s = {{"t_s", seconds(sim_.now())},
            {"resident", resident_total_},
            {"resident_max_over_mean", r},
            {"window_admits_max_over_mean", a},
            {"random_resident_max_over_mean", random_ratio(resident)},
            {"random_window_admits_max_over_mean", random_ratio(admits)},
            {"window_s", seconds(window)},
            {"refused", refused_}};
  series_.push_back(s);
  return s;
}

void scale_run::run_until(time_ms end) {
  while (!events_.empty() && events_.top().at <= end) {
    ev e = events_.top();
    events_.pop();
    sim_.run_until(std::max(e.at, sim_.now()));
    switch (e.kind) {
      case ev_kind::tick:
        on_tick();
        if (create_rate_ > 0 || delete_rate_ > 0)
          push(e.at + 1ms, ev_kind::tick);
        break;
      case ev_kind::attempt: on_attempt(e); break;
      case ev_kind::admitted: {
        auto& n = nodes_[e.node];
        if (n.creating > 0)
          --n.creating;
        if (!n.dead) {
          ++n.resident;
          ++resident_total_;
        }
        ++admitted_;
        ++forwards_hist_[walks_[e.create].forwards];
        break;
      }
      case ev_kind::refused: attempt(e.create); break;
    }
  }
  sim_.run_until(std::max(end, sim_.now()));
}

json scale_run::phase_counters(const char* name, time_ms length,
                               const gossip::traffic_stats& before) {
  auto after = sim_.total_traffic();
  size_t alive = 0;
  for (auto& n : nodes_)
    alive += n.dead ? 0 : 1;
  double per = static_cast<double>(alive) * seconds(length);
  json hist = json::object();
  uint64_t over_two = 0;
  for (auto& [f, count] : forwards_hist_) {
    hist[std::to_string(f)] = count;
    if (f > 2)
      over_two += count;
  }
  json route = json::object();
  for (auto& [f, xs] : route_ms_) {
    std::sort(xs.begin(), xs.end());
    double sum = 0;
    for (double x : xs)
      sum += x;
    route[std::to_string(f)] = {{"mean", sum / static_cast<double>(xs.size())},
                                {"p99", xs[std::min(xs.size() - 1, xs.size() * 99 / 100)]}};
  }
  json out = {{"phase", name},
              {"simulated_s", seconds(length)},
              {"creates_started", started_},
              {"creates_admitted", admitted_},
              {"creates_refused", refused_},
              {"attempts_at_dead_node", dead_hits_},
              {"forwards_histogram", hist},
              {"creates_forwarded_more_than_twice", over_two},
              {"route_ms_by_forwards", route},
              {"worst_resident_max_over_mean", worst_resident_ratio_},
              {"worst_window_admits_max_over_mean", worst_window_ratio_},
              {"gossip_bytes_per_node_s",
               static_cast<double>(after.packet_bytes_sent - before.packet_bytes_sent
                                   + after.stream_bytes_sent - before.stream_bytes_sent)
                 / per},
              {"gossip_packets_per_node_s",
               static_cast<double>(after.packets_sent - before.packets_sent) / per},
              {"series", series_}};
  started_ = admitted_ = refused_ = dead_hits_ = 0;
  forwards_hist_.clear();
  route_ms_.clear();
  worst_resident_ratio_ = worst_window_ratio_ = 0;
  series_ = json::array();
  return out;
}

json scale_run::run() {
  json out;
  // Everyone joins at once.
  for (size_t i = 0; i < o_.nodes; ++i)
    add_node(false);
  for (size_t i = 1; i < o_.nodes; ++i)
    sim_.join(i, {0});
  bool converged = sim_.run_until([&] { return sim_.all_see_all_alive(); }, 120s, 50ms);
  out["join_converged"] = converged;
  out["join_converge_s"] = seconds(sim_.now());
  run_until(sim_.now() + 5s); // first load reports everywhere

  // The burst: fill to per_node sandboxes per node.
  const time_ms window = 1s;
  auto traffic = sim_.total_traffic();
  time_ms start = sim_.now();
  create_rate_ = o_.rate;
  push(sim_.now(), ev_kind::tick);
  size_t target = o_.per_node * o_.nodes;
  while (started_ < target) {
    bool full = create_rate_ == o_.rate;
    run_until(sim_.now() + window);
    sample(window, full);
    if (create_rate_ * seconds(window) + static_cast<double>(started_)
        > static_cast<double>(target))
      create_rate_ = static_cast<double>(target - started_) / seconds(window);
  }
  create_rate_ = 0;
  run_until(sim_.now() + 2s); // the last creates finish
  sample(2s, false);
  out["burst"] = phase_counters("burst", sim_.now() - start, traffic);

  // Churn at full: a node dies, fresh nodes join.
  traffic = sim_.total_traffic();
  start = sim_.now();
  create_rate_ = delete_rate_ = o_.rate;
  push(sim_.now(), ev_kind::tick);
  size_t victim = o_.nodes / 2;
  time_ms killed_at{-1}, dead_seen{-1}, joined_at{-1}, join_seen{-1}, joiner_used{-1};
  std::vector<size_t> joiners;
  for (time_ms t = 0ms; t < time_ms{o_.churn_s * 1000}; t += 250ms) {
    if (t == 5s) {
      sim_.kill(victim);
      auto& v = nodes_[victim];
      resident_total_ -= v.resident;
      v.resident = 0;
      v.dead = true;
      killed_at = sim_.now();
    }
    if (t == 10s && o_.joiners > 0) {
      for (size_t k = 0; k < o_.joiners; ++k) {
        size_t j = add_node(true);
        sim_.join(j, {0});
        joiners.push_back(j);
      }
      joined_at = sim_.now();
    }
    run_until(sim_.now() + 250ms);
    if ((t + 250ms) % window == 0ms)
      sample(window);
    if (killed_at.count() >= 0 && dead_seen.count() < 0
        && all_see(victim, gossip::member_state::dead))
      dead_seen = sim_.now();
    if (joined_at.count() >= 0 && join_seen.count() < 0 && sim_.all_see_all_alive())
      join_seen = sim_.now();
    if (joined_at.count() >= 0 && joiner_used.count() < 0) {
      bool used = std::all_of(joiners.begin(), joiners.end(),
                              [&](size_t j) { return nodes_[j].resident > 0; });
      if (used)
        joiner_used = sim_.now();
    }
  }
  create_rate_ = delete_rate_ = 0;
  run_until(sim_.now() + 2s);
  json churn = phase_counters("churn", sim_.now() - start, traffic);
  churn["kill_all_mark_dead_s"] = dead_seen.count() < 0 ? -1 : seconds(dead_seen - killed_at);
  churn["join_all_see_alive_s"] = join_seen.count() < 0 ? -1 : seconds(join_seen - joined_at);
  churn["joiners_all_placed_on_s"]
    = joiner_used.count() < 0 ? -1 : seconds(joiner_used - joined_at);
  std::vector<double> joiner_resident;
  for (size_t j : joiners)
    joiner_resident.push_back(static_cast<double>(nodes_[j].resident));
  churn["joiner_resident"] = joiner_resident;
  out["churn"] = churn;

  // Loss: no false deaths, and a kill still detected.
  sim_.net().cfg().loss = o_.loss;
  auto deaths = sim_.counters().false_deaths;
  auto suspects = sim_.counters().suspects;
  run_until(sim_.now() + time_ms{o_.loss_s * 1000});
  json lossy = {{"loss", o_.loss},
                {"simulated_s", o_.loss_s},
                {"false_deaths", sim_.counters().false_deaths - deaths},
                {"suspect_events", sim_.counters().suspects - suspects}};
  size_t victim2 = o_.nodes / 4;
  sim_.kill(victim2);
  nodes_[victim2].dead = true;
  time_ms k2 = sim_.now();
  bool seen = sim_.run_until([&] { return all_see(victim2, gossip::member_state::dead); }, 60s,
                             50ms);
  lossy["kill_all_mark_dead_s"] = seen ? seconds(sim_.now() - k2) : -1;
  lossy["false_deaths_total"] = sim_.counters().false_deaths;
  out["lossy"] = lossy;
  return out;
}

} // namespace

json run(const options& o) {
  scale_run r(o);
  json out = r.run();
  out["nodes"] = o.nodes;
  out["per_node"] = o.per_node;
  out["capacity"] = o.capacity;
  out["rate_per_s"] = o.rate;
  out["create_ms"] = {o.create_ms, o.create_ms + o.create_jitter_ms};
  out["k"] = o.policy.k;
  out["spread"] = o.policy.spread == placement::policy::spread_mode::ring ? "ring" : "sample";
  out["max_attempts"] = o.policy.max_attempts;
  out["seed"] = o.seed;
  return out;
}

} // namespace dsec::scale
