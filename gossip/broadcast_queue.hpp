// The queue of updates waiting to be gossiped (memberlist's TransmitLimitedQueue).
// Each broadcast is a ready wire frame about one subject (a member's state, or a
// member's load). A newer broadcast about the same subject replaces the queued
// older one, so stale news is never sent. Frames piggyback on every outgoing
// packet, fewest-sent first (membership before load), and each is dropped after
// retransmit_mult * ceil(log10(N + 1)) sends.
#pragma once

#include "gossip/member.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace dsec::gossip {

/// What a broadcast is about; with the member id it names the subject that a
/// newer broadcast invalidates. Membership goes out before load.
enum class broadcast_kind : uint8_t { membership = 0, load = 1 };

/// Number of sends after which a broadcast is dropped, for a cluster of n.
size_t retransmit_limit(size_t retransmit_mult, size_t n);

/// A transmit-limited, invalidating priority queue of broadcast frames.
class broadcast_queue {
 public:
  /// Queues `frame` about (kind, id), replacing any queued broadcast about it.
  void push(broadcast_kind kind, const std::string& id, bytes frame);

  /// Takes frames fitting in `budget` bytes (each costs its size), fewest
  /// transmits first, counts one transmit on each and drops those that reach
  /// `limit`. Frames that do not fit are skipped, smaller ones may still go.
  std::vector<bytes> take(size_t budget, size_t limit) { return take(budget, limit, limit); }

  /// As above with a separate limit for load broadcasts.
  std::vector<bytes> take(size_t budget, size_t limit, size_t load_limit);

  /// Broadcasts queued.
  size_t size() const { return by_subject_.size(); }

  /// True when a broadcast about (kind, id) is queued.
  bool contains(broadcast_kind kind, const std::string& id) const;

  /// Transmits so far of the broadcast about (kind, id), or -1 when none.
  int transmits(broadcast_kind kind, const std::string& id) const;

  /// Drops everything.
  void clear();

 private:
  /// kind byte + member id: one hash lookup per subject.
  using subject = std::string;
  // Ordering key: kind (membership first), transmits (fewest first), then
  // newest first (negated insertion counter).
  using order_key = std::tuple<broadcast_kind, size_t, int64_t>;

  struct entry {
    subject about;
    bytes frame;
    size_t transmits = 0;
    int64_t serial = 0;
    broadcast_kind kind = broadcast_kind::membership;
    order_key key() const { return {kind, transmits, -serial}; }
  };

  static subject subject_of(broadcast_kind kind, const std::string& id);

  // Map nodes keep their address across extract/insert, so the index can hold
  // plain pointers and take() never touches it except to drop entries.
  std::map<order_key, entry> order_;
  std::unordered_map<subject, entry*> by_subject_;
  int64_t next_serial_ = 0;
};

} // namespace dsec::gossip
