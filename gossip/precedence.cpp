// The SWIM precedence rules: how a statement about a member (alive, suspect,
// dead, left at some incarnation) changes the local view, and when we refute.
//
//   alive(i)   wins over anything with incarnation < i; unknown ids are added.
//   suspect(i) wins over alive(j) for j <= i; on a running suspicion it counts
//              as a confirmation instead.
//   dead(i)    wins over alive/suspect(j) for j <= i.
//   left(i)    like dead, and also wins over dead; it never starts suspicion.
//   About us:  suspect/dead/left (while not leaving) or a newer alive make us
//              bump our incarnation past it and broadcast alive (refutation).
//
// Every statement that changed the view is re-broadcast (infection style).
#include "gossip/memberlist.hpp"

#include "gossip/codec.hpp"

#include <algorithm>

namespace dsec::gossip {

void memberlist::apply(const member_update_msg& m, time_ms now) {
  switch (m.state) {
    case member_state::alive: apply_alive(m, now); break;
    case member_state::suspect: apply_suspect(m, now); break;
    case member_state::dead:
    case member_state::left: apply_dead(m, now); break;
  }
}

void memberlist::apply_alive(const member_update_msg& m, time_ms now) {
  if (m.id == cfg_.id) {
    // A newer incarnation of us is gossiped (our previous life): outbid it.
    if (!leaving_ && m.incarnation > self_->m.incarnation)
      refute(m.incarnation, now);
    return;
  }
  entry* e = lookup(m.id);
  if (!e) {
    entry& added = add_member(m, now);
    emit(event_kind::joined, added.m);
    broadcast_state(added.m, m.from);
    return;
  }
  if (m.incarnation <= e->m.incarnation)
    return;
  member_state before = e->m.state;
  bool moved = e->m.address != m.address;
  e->m.incarnation = m.incarnation;
  e->m.address = m.address;
  set_state(*e, member_state::alive, now);
  if (before == member_state::dead || before == member_state::left)
    emit(event_kind::joined, e->m);
  else if (before == member_state::suspect || moved)
    emit(event_kind::updated, e->m);
  broadcast_state(e->m, m.from);
}

void memberlist::apply_suspect(const member_update_msg& m, time_ms now) {
  entry* e = lookup(m.id);
  if (!e || m.incarnation < e->m.incarnation)
    return;
  if (e == self_) {
    if (!leaving_)
      refute(m.incarnation, now);
    return;
  }
  if (e->suspect) {
    // Independent confirmations shorten the timer; re-gossip new ones so
    // others can count them too.
    if (e->suspect->confirm(m.from))
      broadcast_state(e->m, m.from);
    return;
  }
  if (e->m.state != member_state::alive)
    return;
  e->m.incarnation = m.incarnation;
  set_state(*e, member_state::suspect, now);
  size_t n = live_count();
  time_ms min = suspicion_min_timeout(cfg_.suspicion_mult, n, cfg_.probe_interval,
                                      cfg_.suspicion_min_cap);
  time_ms max{static_cast<int64_t>(static_cast<double>(min.count()) * cfg_.suspicion_max_timeout_mult)};
  size_t k = suspicion_expected_confirmations(cfg_.suspicion_confirmations, n);
  e->suspect = std::make_unique<suspicion>(m.from, k, min, max, now);
  suspected_.insert(m.id);
  emit(event_kind::suspect, e->m);
  broadcast_state(e->m, m.from);
}

void memberlist::apply_dead(const member_update_msg& m, time_ms now) {
  entry* e = lookup(m.id);
  if (!e || m.incarnation < e->m.incarnation)
    return;
  if (e == self_) {
    if (!leaving_)
      refute(m.incarnation, now);
    return;
  }
  if (e->m.state == member_state::left)
    return;
  if (e->m.state == member_state::dead && m.state == member_state::dead)
    return;
  e->m.incarnation = m.incarnation;
  set_state(*e, m.state, now);
  emit(m.state == member_state::left ? event_kind::left : event_kind::dead, e->m);
  broadcast_state(e->m, m.from);
}

void memberlist::apply_load(const load_update_msg& m, time_ms now) {
  entry* e = lookup(m.id);
  if (!e || e == self_ || e->m.state == member_state::dead || e->m.state == member_state::left)
    return;
  auto heard = std::make_pair(m.incarnation, m.report.seq);
  if (heard <= std::make_pair(e->m.load_incarnation, e->m.load.seq))
    return;
  e->m.load = m.report;
  e->m.load_incarnation = m.incarnation;
  if (cfg_.load_events)
    emit(event_kind::updated, e->m);
  broadcast_load(e->m);
}

void memberlist::refute(uint64_t heard, time_ms now) {
  self_->m.incarnation = std::max(self_->m.incarnation, heard) + 1;
  broadcast_state(self_->m, cfg_.id);
}

memberlist::entry& memberlist::add_member(const member_update_msg& m, time_ms now) {
  entry e;
  e.m.id = m.id;
  e.m.address = m.address;
  e.m.incarnation = m.incarnation;
  e.m.state = member_state::alive;
  e.m.state_changed = now;
  e.index = ids_.size();
  ids_.push_back(m.id);
  ++counts_[static_cast<size_t>(member_state::alive)];
  entry& added = members_.emplace(m.id, std::move(e)).first->second;
  // Probe newcomers in this round, at a random place among those not yet probed.
  if (m.id != cfg_.id) {
    size_t lo = std::min(probe_index_, probe_order_.size());
    size_t pos = lo + rng_() % (probe_order_.size() - lo + 1);
    probe_order_.insert(probe_order_.begin() + static_cast<std::ptrdiff_t>(pos), m.id);
  }
  return added;
}

void memberlist::remove_member(const std::string& id) {
  auto it = members_.find(id);
  if (it == members_.end() || &it->second == self_)
    return;
  size_t idx = it->second.index;
  --counts_[static_cast<size_t>(it->second.m.state)];
  if (idx + 1 != ids_.size()) {
    ids_[idx] = std::move(ids_.back());
    members_.at(ids_[idx]).index = idx;
  }
  ids_.pop_back();
  suspected_.erase(id);
  members_.erase(it);
}

void memberlist::set_state(entry& e, member_state s, time_ms now) {
  if (e.m.state != s) {
    --counts_[static_cast<size_t>(e.m.state)];
    ++counts_[static_cast<size_t>(s)];
    e.m.state = s;
    e.m.state_changed = now;
  }
  if (s != member_state::suspect && e.suspect) {
    e.suspect.reset();
    suspected_.erase(e.m.id);
  }
}

void memberlist::broadcast_state(const member& m, const std::string& from) {
  member_update_msg u{m.state, m.incarnation, m.id, m.address, from};
  broadcasts_.push(broadcast_kind::membership, m.id, encode_frame(u));
}

void memberlist::broadcast_load(const member& m) {
  load_update_msg u{m.id, m.load_incarnation, m.load};
  broadcasts_.push(broadcast_kind::load, m.id, encode_frame(u));
}

void memberlist::emit(event_kind k, const member& m) { events_.push_back({k, m}); }

memberlist::entry* memberlist::lookup(const std::string& id) {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

void memberlist::expire_suspicions(time_ms now) {
  std::vector<std::string> expired;
  for (const auto& id : suspected_)
    if (members_.at(id).suspect->deadline() <= now)
      expired.push_back(id);
  for (const auto& id : expired) {
    const member& m = members_.at(id).m;
    apply_dead({member_state::dead, m.incarnation, m.id, m.address, cfg_.id}, now);
  }
}

void memberlist::reap(time_ms now) {
  std::vector<std::string> gone;
  for (const auto& id : ids_) {
    const member& m = members_.at(id).m;
    bool over = m.state == member_state::dead || m.state == member_state::left;
    if (over && now - m.state_changed >= cfg_.dead_reap_timeout)
      gone.push_back(id);
  }
  for (const auto& id : gone)
    remove_member(id);
}

} // namespace dsec::gossip
