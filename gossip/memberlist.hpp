// One node's SWIM membership with Lifeguard-style suspicion and piggybacked load
// dissemination, as pure logic: no threads, no sockets, no clock. The owner (the
// gossip actor, or a simulation) calls `tick(now)` at `next_wakeup()`, feeds
// received bytes to `handle_packet` / `handle_stream`, and drains `take_events()`
// after each call. Outgoing bytes go through the injected `transport`.
//
// The code is split by mechanism: memberlist.cpp (entry points, dispatch, view),
// precedence.cpp (the precedence rules that move members between states) and
// probe.cpp (probing, indirect probes, gossip, push/pull, join).
#pragma once

#include "core/error.hpp"
#include "gossip/broadcast_queue.hpp"
#include "gossip/config.hpp"
#include "gossip/messages.hpp"
#include "gossip/suspicion.hpp"
#include "gossip/transport.hpp"

#include <deque>
#include <memory>
#include <set>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace dsec::gossip {

/// Traffic counters of one node (for benches and metrics).
struct traffic_stats {
  uint64_t packets_sent = 0;
  uint64_t packet_bytes_sent = 0;
  uint64_t streams_sent = 0;
  uint64_t stream_bytes_sent = 0;
  uint64_t packets_received = 0;
  /// Packets or streams that failed to decode (dropped).
  uint64_t decode_errors = 0;
};

/// One node's membership view and protocol state.
class memberlist {
 public:
  // -- constructors -----------------------------------------------------------

  /// A node alone in its cluster, alive at config.incarnation. `seed` feeds the
  /// RNG (probe order, gossip targets): same seed, same inputs, same run.
  memberlist(config cfg, transport& net, uint64_t seed, time_ms now);

  memberlist(const memberlist&) = delete;
  memberlist& operator=(const memberlist&) = delete;

  // -- driving ----------------------------------------------------------------

  /// Starts joining through `seeds` ("host:port"; our own address is skipped):
  /// a full push/pull with each, retried every join_retry_interval while we know
  /// no live peer. Empty seeds = first node. invalid_argument on empty entries
  /// or an id / address longer than the wire allows (codec_limits).
  status join(const std::vector<std::string>& seeds, time_ms now);

  /// Leaves gracefully: broadcasts `left` at once to gossip_fanout peers and
  /// stops probing. Keep ticking ~1 s so the news spreads before shutdown.
  void leave(time_ms now);

  /// Runs every timer due at `now`: probes, suspicion timeouts, gossip, push/pull.
  void tick(time_ms now);

  /// Earliest time at which tick() has work.
  time_ms next_wakeup() const;

  /// Feeds one datagram received from `from` ("host:port").
  status handle_packet(const std::string& from, const bytes& data, time_ms now);

  /// Feeds one stream message (push/pull) received from `from`.
  status handle_stream(const std::string& from, const bytes& data, time_ms now);

  /// Publishes this node's load; seq is assigned here, layers are truncated to
  /// config::max_layers_in_report.
  void set_local_load(load_report report, time_ms now);

  // -- view -------------------------------------------------------------------

  /// Every known member, self included, dead and left ones until reaped.
  std::vector<member> members() const;

  /// The member with this id, or nullptr.
  const member* find(const std::string& id) const;

  /// This node as it advertises itself.
  const member& self() const { return self_->m; }

  /// Members currently in state `s` (self included when alive).
  size_t count(member_state s) const { return counts_[static_cast<size_t>(s)]; }

  /// Alive + suspect members: the cluster size used in timer math.
  size_t live_count() const;

  /// Drains the events since the last call (oldest first).
  std::vector<event> take_events();

  const config& cfg() const { return cfg_; }
  const traffic_stats& traffic() const { return traffic_; }
  size_t pending_broadcasts() const { return broadcasts_.size(); }
  bool has_left() const { return leaving_; }

 private:
  struct entry {
    member m;
    /// Set while suspect (a pointer: most entries never need one).
    std::unique_ptr<suspicion> suspect;
    /// Position in ids_, for O(1) removal and random picks.
    size_t index = 0;
  };

  struct probe_state {
    bool active = false;
    bool acked = false;
    bool indirect_sent = false;
    uint32_t seq = 0;
    std::string target;
    time_ms sent{0};
  };

  struct forward {
    std::string origin;
    uint32_t origin_seq = 0;
    time_ms expires{0};
  };

  // -- precedence.cpp: precedence rules ---------------------------------------

  /// Applies one statement about a member (dispatches on its state).
  void apply(const member_update_msg& m, time_ms now);
  /// alive(i): adds unknown ids, wins over anything older than i.
  void apply_alive(const member_update_msg& m, time_ms now);
  /// suspect(i): starts suspicion of an alive member, or confirms a running one.
  void apply_suspect(const member_update_msg& m, time_ms now);
  /// dead(i) and left(i); left also wins over dead.
  void apply_dead(const member_update_msg& m, time_ms now);
  /// A newer (incarnation, seq) load report replaces the member's load.
  void apply_load(const load_update_msg& m, time_ms now);
  /// Bumps our incarnation past `heard` and broadcasts alive.
  void refute(uint64_t heard, time_ms now);
  /// Adds an alive member and schedules it in this probe round.
  entry& add_member(const member_update_msg& m, time_ms now);
  /// Forgets a member (never ourselves).
  void remove_member(const std::string& id);
  /// Moves `e` to `s`, keeping the per-state counts; ends its suspicion unless `s` is suspect.
  void set_state(entry& e, member_state s, time_ms now);
  /// Queues `m`'s state for gossip (a newer one about the same member replaces it).
  void broadcast_state(const member& m, const std::string& from);
  /// Queues `m`'s load for gossip.
  void broadcast_load(const member& m);
  /// Records an event for take_events().
  void emit(event_kind k, const member& m);
  /// The entry of `id`, or null.
  entry* lookup(const std::string& id);
  /// Declares dead every suspect whose suspicion ran out.
  void expire_suspicions(time_ms now);
  /// Forgets members dead or left for longer than dead_reap_timeout.
  void reap(time_ms now);

  // -- probe.cpp: probing, gossip, push/pull -----------------------------------

  void run_probe_timers(time_ms now);
  void finish_probe(time_ms now);
  void start_probe(time_ms now);
  void send_indirect(time_ms now);
  const entry* next_probe_target();
  void on_ping(const std::string& from, const ping_msg& m);
  void on_ping_req(const std::string& from, const ping_req_msg& m, time_ms now);
  void on_ack(const ack_msg& m);
  void expire_forwards(time_ms now);
  void gossip(time_ms now);
  void push_pull(time_ms now);
  void send_join(time_ms now);
  void merge(const push_pull_msg& m, time_ms now);
  push_pull_msg local_state(bool join, bool reply) const;
  std::vector<const entry*> random_members(size_t k, const std::string& exclude,
                                           bool include_recent_dead, time_ms now);
  void send_with_piggyback(const std::string& to, const message& m);
  void send_stream(const std::string& to, const message& m);
  std::vector<bytes> take_broadcasts(size_t budget);
  /// A packet came from `from`: if we hold that member dead, send it our state.
  void tell_the_dead(const std::string& from);
  /// Now and then, our state to a member we hold dead (a healed partition).
  void sync_with_dead();

  config cfg_;
  transport& net_;
  std::mt19937_64 rng_;
  std::unordered_map<std::string, entry> members_;
  std::vector<std::string> ids_;
  /// Ids of members with a running suspicion timer (few; scanned per wakeup).
  std::set<std::string> suspected_;
  entry* self_ = nullptr;
  size_t counts_[4] = {0, 0, 0, 0};
  broadcast_queue broadcasts_;
  std::vector<event> events_;
  traffic_stats traffic_;

  std::vector<std::string> probe_order_;
  size_t probe_index_ = 0;
  probe_state probe_;
  uint32_t next_seq_ = 1;
  std::unordered_map<uint32_t, forward> forwards_;
  std::deque<std::pair<time_ms, uint32_t>> forward_expiry_;

  std::vector<std::string> seeds_;
  bool joining_ = false;
  bool leaving_ = false;
  uint64_t load_seq_ = 0;

  time_ms next_probe_at_;
  time_ms next_gossip_at_;
  time_ms next_push_pull_at_;
  time_ms next_join_at_;
  time_ms next_reap_at_;
};

} // namespace dsec::gossip
