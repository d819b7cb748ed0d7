// Failure detection and dissemination timers: one probe per protocol period
// (ping, then ping-req through k peers after probe_timeout, suspect at the end
// of the period), gossip of queued broadcasts to random peers, periodic
// push/pull with one random peer, and the join handshake.
#include "gossip/memberlist.hpp"

#include "gossip/codec.hpp"

#include <algorithm>

namespace dsec::gossip {

void memberlist::run_probe_timers(time_ms now) {
  if (probe_.active && !probe_.acked && !probe_.indirect_sent
      && now >= probe_.sent + cfg_.probe_timeout)
    send_indirect(now);
  if (now < next_probe_at_)
    return;
  finish_probe(now);
  start_probe(now);
  // Stay on the period grid unless we fell behind by a whole period (stall).
  next_probe_at_ += cfg_.probe_interval;
  if (next_probe_at_ <= now)
    next_probe_at_ = now + cfg_.probe_interval;
}

void memberlist::finish_probe(time_ms now) {
  if (!probe_.active)
    return;
  probe_.active = false;
  if (probe_.acked)
    return;
  // Lifeguard's lesson: if we ourselves were stalled past the period, the
  // missing ack says nothing about the target. Do not accuse it.
  if (now - probe_.sent > 2 * cfg_.probe_interval)
    return;
  entry* e = lookup(probe_.target);
  if (!e || e->m.state == member_state::dead || e->m.state == member_state::left)
    return;
  apply_suspect({member_state::suspect, e->m.incarnation, e->m.id, e->m.address, cfg_.id}, now);
}

void memberlist::start_probe(time_ms now) {
  const entry* target = next_probe_target();
  if (!target)
    return;
  probe_ = probe_state{true, false, false, next_seq_++, target->m.id, now};
  send_with_piggyback(target->m.address, ping_msg{probe_.seq, target->m.id});
}

void memberlist::send_indirect(time_ms now) {
  probe_.indirect_sent = true;
  const entry* target = lookup(probe_.target);
  if (!target)
    return;
  ping_req_msg req{probe_.seq, target->m.id, target->m.address};
  for (const entry* peer : random_members(cfg_.indirect_checks, probe_.target, false, now))
    send_with_piggyback(peer->m.address, req);
}

const memberlist::entry* memberlist::next_probe_target() {
  // At most two passes: finish the current order, then reshuffle once.
  for (int pass = 0; pass < 2; ++pass) {
    while (probe_index_ < probe_order_.size()) {
      const entry* e = lookup(probe_order_[probe_index_++]);
      if (e && e != self_
          && (e->m.state == member_state::alive || e->m.state == member_state::suspect))
        return e;
    }
    probe_order_.clear();
    for (const auto& id : ids_)
      if (id != cfg_.id)
        probe_order_.push_back(id);
    std::shuffle(probe_order_.begin(), probe_order_.end(), rng_);
    probe_index_ = 0;
  }
  return nullptr;
}

void memberlist::on_ping(const std::string& from, const ping_msg& m) {
  if (m.target != cfg_.id || leaving_)
    return;
  send_with_piggyback(from, ack_msg{m.seq});
}

void memberlist::on_ping_req(const std::string& from, const ping_req_msg& m, time_ms now) {
  if (leaving_ || m.target == cfg_.id)
    return;
  uint32_t seq = next_seq_++;
  time_ms expires = now + cfg_.probe_interval;
  forwards_[seq] = forward{from, m.seq, expires};
  forward_expiry_.emplace_back(expires, seq);
  send_with_piggyback(m.target_address, ping_msg{seq, m.target});
}

void memberlist::on_ack(const ack_msg& m) {
  if (probe_.active && m.seq == probe_.seq) {
    probe_.acked = true;
    return;
  }
  auto it = forwards_.find(m.seq);
  if (it == forwards_.end())
    return;
  send_with_piggyback(it->second.origin, ack_msg{it->second.origin_seq});
  forwards_.erase(it);
}

void memberlist::expire_forwards(time_ms now) {
  while (!forward_expiry_.empty() && forward_expiry_.front().first <= now) {
    forwards_.erase(forward_expiry_.front().second);
    forward_expiry_.pop_front();
  }
}

void memberlist::gossip(time_ms now) {
  if (broadcasts_.size() == 0)
    return;
  for (const entry* peer : random_members(cfg_.gossip_fanout, "", true, now)) {
    auto frames = take_broadcasts(cfg_.max_packet_size - header_size);
    if (frames.empty())
      return;
    bytes out;
    append_header(out);
    for (const auto& f : frames)
      out.insert(out.end(), f.begin(), f.end());
    ++traffic_.packets_sent;
    traffic_.packet_bytes_sent += out.size();
    net_.send_packet(peer->m.address, std::move(out));
  }
}

void memberlist::push_pull(time_ms now) {
  auto state = local_state(false, false);
  auto peers = random_members(1, "", false, now);
  if (!peers.empty())
    send_stream(peers.front()->m.address, state);
  // Reconnect (as serf does): a seed we do not see alive may sit behind a
  // healed partition, after both sides declared each other dead and reaped.
  if (seeds_.empty())
    return;
  const std::string& seed = seeds_[rng_() % seeds_.size()];
  for (const auto& id : ids_) {
    const member& m = members_.at(id).m;
    if (m.address == seed && (m.state == member_state::alive || m.state == member_state::suspect))
      return;
  }
  send_stream(seed, state);
}

void memberlist::send_join(time_ms now) {
  auto state = local_state(true, false);
  for (const auto& seed : seeds_)
    send_stream(seed, state);
  next_join_at_ = now + cfg_.join_retry_interval;
}

void memberlist::merge(const push_pull_msg& m, time_ms now) {
  for (const auto& s : m.members) {
    member_update_msg u{s.state, s.incarnation, s.id, s.address, m.from};
    // As memberlist does: a remote "dead" only makes us suspect, so one
    // peer's stale verdict cannot kill a member we can still probe.
    if (u.state == member_state::dead)
      u.state = member_state::suspect;
    apply(u, now);
    if (s.load.seq > 0)
      apply_load({s.id, s.load_incarnation, s.load}, now);
  }
}

push_pull_msg memberlist::local_state(bool join, bool reply) const {
  push_pull_msg out;
  out.join = join;
  out.reply = reply;
  out.from = cfg_.id;
  out.members.reserve(ids_.size());
  for (const auto& id : ids_) {
    const member& m = members_.at(id).m;
    out.members.push_back({m.id, m.address, m.incarnation, m.state, m.load_incarnation, m.load});
  }
  return out;
}

std::vector<const memberlist::entry*> memberlist::random_members(
    size_t k, const std::string& exclude, bool include_recent_dead, time_ms now) {
  auto eligible = [&](const entry& e) {
    if (&e == self_ || e.m.id == exclude)
      return false;
    if (e.m.state == member_state::alive || e.m.state == member_state::suspect)
      return true;
    return include_recent_dead && e.m.state == member_state::dead
           && now - e.m.state_changed < cfg_.gossip_to_dead;
  };
  std::vector<const entry*> out;
  if (k == 0 || ids_.size() <= 1)
    return out;
  if (ids_.size() <= 4 * k + 2) {
    for (const auto& id : ids_)
      if (const entry& e = members_.at(id); eligible(e))
        out.push_back(&e);
    std::shuffle(out.begin(), out.end(), rng_);
    if (out.size() > k)
      out.resize(k);
    return out;
  }
  // Large views: sample with a bounded number of tries instead of a scan.
  for (size_t tries = 0; tries < 8 * k && out.size() < k; ++tries) {
    const entry& e = members_.at(ids_[rng_() % ids_.size()]);
    if (eligible(e) && std::find(out.begin(), out.end(), &e) == out.end())
      out.push_back(&e);
  }
  return out;
}

void memberlist::send_with_piggyback(const std::string& to, const message& m) {
  bytes out;
  append_header(out);
  auto frame = encode_frame(m);
  out.insert(out.end(), frame.begin(), frame.end());
  if (out.size() < cfg_.max_packet_size)
    for (const auto& f : take_broadcasts(cfg_.max_packet_size - out.size()))
      out.insert(out.end(), f.begin(), f.end());
  ++traffic_.packets_sent;
  traffic_.packet_bytes_sent += out.size();
  net_.send_packet(to, std::move(out));
}

void memberlist::send_stream(const std::string& to, const message& m) {
  auto out = encode_packet({m});
  ++traffic_.streams_sent;
  traffic_.stream_bytes_sent += out.size();
  net_.send_stream(to, std::move(out));
}

std::vector<bytes> memberlist::take_broadcasts(size_t budget) {
  size_t n = std::max<size_t>(1, live_count());
  return broadcasts_.take(budget, retransmit_limit(cfg_.retransmit_mult, n),
                          retransmit_limit(cfg_.load_retransmit_mult, n));
}

} // namespace dsec::gossip
