// memberlist entry points: construction, the tick that runs due timers, packet
// and stream dispatch, load publication and the read-only view.
#include "gossip/memberlist.hpp"

#include "gossip/codec.hpp"

#include <algorithm>

namespace dsec::gossip {

const char* to_string(member_state s) {
  switch (s) {
    case member_state::alive: return "alive";
    case member_state::suspect: return "suspect";
    case member_state::dead: return "dead";
    case member_state::left: return "left";
  }
  return "unknown";
}

const char* to_string(event_kind k) {
  switch (k) {
    case event_kind::joined: return "joined";
    case event_kind::updated: return "updated";
    case event_kind::suspect: return "suspect";
    case event_kind::dead: return "dead";
    case event_kind::left: return "left";
  }
  return "unknown";
}

memberlist::memberlist(config cfg, transport& net, uint64_t seed, time_ms now)
    : cfg_(std::move(cfg)), net_(net), rng_(seed) {
  member_update_msg me{member_state::alive, cfg_.incarnation, cfg_.id, cfg_.address, cfg_.id};
  self_ = &add_member(me, now);
  // Announce ourselves on the first packets we send (joins, acks, gossip).
  broadcast_state(self_->m, cfg_.id);
  // Spread the start of periodic work so nodes started together do not probe
  // and gossip in lockstep.
  auto jitter = [&](time_ms period) {
    return time_ms{static_cast<int64_t>(rng_() % static_cast<uint64_t>(std::max<int64_t>(1, period.count())))};
  };
  next_probe_at_ = now + jitter(cfg_.probe_interval);
  next_gossip_at_ = now + jitter(cfg_.gossip_interval);
  next_push_pull_at_ = now + jitter(cfg_.push_pull_interval);
  next_join_at_ = now + cfg_.join_retry_interval;
  next_reap_at_ = now + std::chrono::seconds(1);
}

status memberlist::join(const std::vector<std::string>& seeds, time_ms now) {
  if (cfg_.id.empty() || cfg_.id.size() > codec_limits::max_id
      || cfg_.address.size() > codec_limits::max_address)
    return invalid_argument("gossip join " + cfg_.id + ": id must be 1.."
                            + std::to_string(codec_limits::max_id) + " bytes, address at most "
                            + std::to_string(codec_limits::max_address));
  seeds_.clear();
  for (const auto& s : seeds) {
    if (s.empty())
      return invalid_argument("gossip join " + cfg_.id + ": empty seed address");
    if (s != cfg_.address)
      seeds_.push_back(s);
  }
  joining_ = !seeds_.empty();
  if (joining_)
    send_join(now);
  return {};
}

void memberlist::leave(time_ms now) {
  if (leaving_)
    return;
  leaving_ = true;
  joining_ = false;
  probe_.active = false;
  self_->m.incarnation += 1;
  set_state(*self_, member_state::left, now);
  broadcast_state(self_->m, cfg_.id);
  gossip(now);
}

void memberlist::tick(time_ms now) {
  if (!leaving_)
    run_probe_timers(now);
  expire_suspicions(now);
  expire_forwards(now);
  if (now >= next_gossip_at_) {
    gossip(now);
    next_gossip_at_ = std::max(next_gossip_at_ + cfg_.gossip_interval, now + time_ms{1});
  }
  if (now >= next_push_pull_at_) {
    if (!leaving_)
      push_pull(now);
    next_push_pull_at_ = now + cfg_.push_pull_interval;
  }
  if (joining_ && now >= next_join_at_) {
    if (live_count() > 1)
      joining_ = false;
    else
      send_join(now);
  }
  if (now >= next_reap_at_) {
    reap(now);
    sync_with_dead();
    next_reap_at_ = now + std::chrono::seconds(1);
  }
}

time_ms memberlist::next_wakeup() const {
  time_ms t = std::min({next_gossip_at_, next_push_pull_at_, next_reap_at_});
  if (!leaving_) {
    t = std::min(t, next_probe_at_);
    if (probe_.active && !probe_.acked && !probe_.indirect_sent)
      t = std::min(t, probe_.sent + cfg_.probe_timeout);
  }
  if (joining_)
    t = std::min(t, next_join_at_);
  for (const auto& id : suspected_)
    t = std::min(t, members_.at(id).suspect->deadline());
  if (!forward_expiry_.empty())
    t = std::min(t, forward_expiry_.front().first);
  return t;
}

status memberlist::handle_packet(const std::string& from, const bytes& data, time_ms now) {
  ++traffic_.packets_received;
  auto msgs = decode_packet(data);
  if (!msgs) {
    ++traffic_.decode_errors;
    return error{msgs.err().code, msgs.err().message + " from " + from};
  }
  // State updates first, so an ack sent below already carries our refutation.
  for (const auto& m : *msgs) {
    if (auto* u = std::get_if<member_update_msg>(&m))
      apply(*u, now);
    else if (auto* l = std::get_if<load_update_msg>(&m))
      apply_load(*l, now);
  }
  for (const auto& m : *msgs) {
    if (auto* p = std::get_if<ping_msg>(&m))
      on_ping(from, *p);
    else if (auto* r = std::get_if<ping_req_msg>(&m))
      on_ping_req(from, *r, now);
    else if (auto* a = std::get_if<ack_msg>(&m))
      on_ack(*a);
  }
  tell_the_dead(from);
  return {};
}

void memberlist::sync_with_dead() {
  // Once a second, with probability min(1, 8 / N): our state to one member we
  // hold dead (not yet reaped). A member behind a healed partition hears it
  // is dead and refutes within about a second (issue 28: converged within
  // 10 s of a heal) rather than at a push/pull 20 s apart; the whole cluster
  // sends ~8 such streams a second while anyone is dead, whatever its size.
  if (leaving_ || counts_[static_cast<size_t>(member_state::dead)] == 0)
    return;
  size_t n = ids_.size();
  if (n > 8 && rng_() % n >= 8)
    return;
  std::vector<const member*> dead;
  for (const auto& id : ids_) {
    const member& m = members_.at(id).m;
    if (m.state == member_state::dead && id != cfg_.id)
      dead.push_back(&m);
  }
  if (!dead.empty())
    send_stream(dead[rng_() % dead.size()]->address, local_state(false, false));
}

void memberlist::tell_the_dead(const std::string& from) {
  // A packet from a member we hold dead: it is back (a healed partition). Our
  // state tells it so at once, and it refutes (issue 28: converged within
  // 10 s of a heal) instead of waiting for a push/pull (20 s). Self-limiting:
  // once it refuted it is no longer dead here.
  if (leaving_ || counts_[static_cast<size_t>(member_state::dead)] == 0)
    return;
  for (const auto& id : ids_) {
    const member& m = members_.at(id).m;
    if (m.address == from && m.state == member_state::dead) {
      send_stream(from, local_state(false, false));
      return;
    }
  }
}

status memberlist::handle_stream(const std::string& from, const bytes& data, time_ms now) {
  auto msgs = decode_packet(data);
  if (!msgs) {
    ++traffic_.decode_errors;
    return error{msgs.err().code, msgs.err().message + " from " + from};
  }
  for (const auto& m : *msgs) {
    const auto* pp = std::get_if<push_pull_msg>(&m);
    if (!pp)
      continue;
    if (!pp->reply && !leaving_)
      send_stream(from, local_state(false, true));
    merge(*pp, now);
    if (pp->reply && live_count() > 1)
      joining_ = false;
  }
  return {};
}

void memberlist::set_local_load(load_report report, time_ms now) {
  if (report.layers.size() > cfg_.max_layers_in_report)
    report.layers.resize(cfg_.max_layers_in_report);
  report.seq = ++load_seq_;
  self_->m.load = std::move(report);
  self_->m.load_incarnation = self_->m.incarnation;
  broadcast_load(self_->m);
}

std::vector<member> memberlist::members() const {
  std::vector<member> out;
  out.reserve(members_.size());
  for (const auto& id : ids_)
    out.push_back(members_.at(id).m);
  return out;
}

const member* memberlist::find(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second.m;
}

size_t memberlist::live_count() const {
  return counts_[static_cast<size_t>(member_state::alive)]
         + counts_[static_cast<size_t>(member_state::suspect)];
}

std::vector<event> memberlist::take_events() {
  std::vector<event> out;
  out.swap(events_);
  return out;
}

} // namespace dsec::gossip
