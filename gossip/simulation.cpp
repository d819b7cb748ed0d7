// The discrete-event loop over memberlist nodes and the memory network.
#include "gossip/simulation.hpp"

#include <algorithm>

namespace dsec::gossip {
namespace {

std::string address_of(size_t i) {
  return "10." + std::to_string((i >> 16) & 255) + "." + std::to_string((i >> 8) & 255) + "."
         + std::to_string(i & 255) + ":7946";
}

constexpr time_ms never{INT64_MAX};

} // namespace

simulation::simulation(sim_config cfg)
    : cfg_(std::move(cfg)), net_(cfg_.net, cfg_.seed * 7919 + 1), rng_(cfg_.seed) {}

simulation::~simulation() = default;

size_t simulation::add_node() {
  size_t i = nodes_.size();
  auto n = std::make_unique<sim_node>();
  n->id = "node-" + std::to_string(i);
  n->address = address_of(i);
  config c = cfg_.node;
  c.id = n->id;
  c.address = n->address;
  n->list = std::make_unique<memberlist>(c, net_.endpoint(n->address), rng_(), now_);
  n->next_load = cfg_.load_interval.count() > 0 ? now_ : never;
  by_address_[n->address] = i;
  by_id_[n->id] = i;
  nodes_.push_back(std::move(n));
  ++running_;
  publish_load(i);
  schedule(i);
  return i;
}

void simulation::start_cluster(size_t n) {
  size_t first = nodes_.size();
  for (size_t k = 0; k < n; ++k)
    add_node();
  for (size_t k = first + 1; k < first + n; ++k)
    join(k, {first});
}

void simulation::join(size_t i, const std::vector<size_t>& seeds) {
  std::vector<std::string> addrs;
  for (size_t s : seeds)
    addrs.push_back(nodes_[s]->address);
  (void)nodes_[i]->list->join(addrs, now_);
  drain(i);
  schedule(i);
}

void simulation::kill(size_t i) {
  if (nodes_[i]->killed)
    return;
  nodes_[i]->killed = true;
  net_.kill(nodes_[i]->address);
  if (!nodes_[i]->left)
    --running_;
}

void simulation::stall(size_t i, time_ms d) {
  net_.stall(nodes_[i]->address, now_ + d);
  schedule(i);
}

void simulation::leave(size_t i) {
  nodes_[i]->list->leave(now_);
  if (!nodes_[i]->left && !nodes_[i]->killed)
    --running_;
  nodes_[i]->left = true;
  drain(i);
  schedule(i);
}

void simulation::schedule(size_t i) {
  sim_node& n = *nodes_[i];
  if (n.killed)
    return;
  time_ms at = std::min(n.list->next_wakeup(), n.next_load);
  at = std::max({at, now_, net_.stalled_until(n.address)});
  n.scheduled = at;
  wakeups_.push({at, i});
}

bool simulation::pop_stale_wakeups() {
  while (!wakeups_.empty()) {
    const wakeup& w = wakeups_.top();
    const sim_node& n = *nodes_[w.node];
    if (!n.killed && n.scheduled == w.at)
      return true;
    wakeups_.pop();
  }
  return false;
}

void simulation::run_until(time_ms end) {
  for (;;) {
    time_ms tn = never;
    bool has_net = net_.next_time(tn);
    time_ms tw = pop_stale_wakeups() ? wakeups_.top().at : never;
    time_ms t = std::min(has_net ? tn : never, tw);
    if (t > end)
      break;
    now_ = t;
    net_.set_now(t);
    if (has_net && tn <= tw) {
      delivery d;
      if (net_.pop(d))
        deliver(d);
    } else {
      size_t i = wakeups_.top().node;
      wakeups_.pop();
      wake(i);
    }
  }
  now_ = end;
  net_.set_now(end);
}

bool simulation::run_until(const std::function<bool()>& done, time_ms limit, time_ms step) {
  time_ms end = now_ + limit;
  while (!done()) {
    if (now_ >= end)
      return false;
    run_until(std::min(end, now_ + step));
  }
  return true;
}

void simulation::wake(size_t i) {
  sim_node& n = *nodes_[i];
  if (net_.stalled_until(n.address) > now_) {
    schedule(i);
    return;
  }
  if (now_ >= n.next_load)
    publish_load(i);
  n.list->tick(now_);
  drain(i);
  schedule(i);
}

void simulation::deliver(delivery& d) {
  auto it = by_address_.find(d.to);
  if (it == by_address_.end() || nodes_[it->second]->killed)
    return;
  size_t i = it->second;
  memberlist& m = *nodes_[i]->list;
  if (d.stream)
    (void)m.handle_stream(d.from, d.data, now_);
  else
    (void)m.handle_packet(d.from, d.data, now_);
  drain(i);
  schedule(i);
}

void simulation::drain(size_t i) {
  for (const auto& e : nodes_[i]->list->take_events()) {
    if (e.kind == event_kind::suspect)
      ++counters_.suspects;
    if (e.kind == event_kind::dead) {
      ++counters_.deaths;
      auto it = by_id_.find(e.who.id);
      if (it != by_id_.end() && !nodes_[it->second]->killed && !nodes_[it->second]->left)
        ++counters_.false_deaths;
    }
    if (on_event)
      on_event(i, e);
  }
}

void simulation::publish_load(size_t i) {
  sim_node& n = *nodes_[i];
  if (cfg_.load_interval.count() <= 0 || n.left)
    return;
  load_report r;
  if (load_source) {
    r = load_source(i);
  } else {
    r.free_memory_mb = 16384 - rng_() % 8192;
    r.cpu_load = static_cast<double>(rng_() % 1000) / 1000.0;
    r.sandboxes = static_cast<uint32_t>(rng_() % 200);
    r.creating = static_cast<uint32_t>(rng_() % 8);
  }
  n.list->set_local_load(std::move(r), now_);
  n.next_load = now_ + cfg_.load_interval;
}

bool simulation::all_see_all_alive() const {
  for (const auto& n : nodes_)
    if (!n->killed && !n->left && n->list->count(member_state::alive) != running_)
      return false;
  return true;
}

size_t simulation::nodes_seeing(size_t target, member_state s) const {
  size_t count = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i == target || nodes_[i]->killed || nodes_[i]->left)
      continue;
    const member* m = nodes_[i]->list->find(nodes_[target]->id);
    if (m ? m->state == s : s == member_state::dead)
      ++count;
  }
  return count;
}

size_t simulation::observers(size_t target) const {
  size_t count = 0;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (i != target && !nodes_[i]->killed && !nodes_[i]->left)
      ++count;
  return count;
}

traffic_stats simulation::total_traffic() const {
  traffic_stats t;
  for (const auto& n : nodes_) {
    const auto& s = n->list->traffic();
    t.packets_sent += s.packets_sent;
    t.packet_bytes_sent += s.packet_bytes_sent;
    t.streams_sent += s.streams_sent;
    t.stream_bytes_sent += s.stream_bytes_sent;
    t.packets_received += s.packets_received;
    t.decode_errors += s.decode_errors;
  }
  return t;
}

} // namespace dsec::gossip
