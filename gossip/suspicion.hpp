// Suspicion timing, after Lifeguard (and hashicorp/memberlist's suspicion.go):
// a suspected member gets a timeout that starts at a maximum and shrinks towards
// a minimum as independent peers confirm the suspicion, so a real failure seen by
// many is declared fast while a lone, maybe broken, suspector waits long. The
// math is pure functions (table-tested); `suspicion` is the per-member record.
#pragma once

#include "gossip/member.hpp"

#include <cstddef>
#include <set>
#include <string>

namespace dsec::gossip {

/// Minimum suspicion timeout: mult * max(1, log10(max(1, n))) * probe_interval.
/// The floor of 1 on the node scale is memberlist's: below 10 nodes the log
/// would shrink the timeout below one refutation round.
time_ms suspicion_min_timeout(double mult, size_t n, time_ms probe_interval);

/// The minimum with its node scale capped: suspicion_min_timeout, but no
/// longer than `cap` unless the unscaled minimum (mult * probe_interval)
/// already is. See config::suspicion_min_cap.
time_ms suspicion_min_timeout(double mult, size_t n, time_ms probe_interval, time_ms cap);

/// Total timeout after `confirmations` of `k` expected confirmations:
/// max(min, max - (max - min) * log(C + 1) / log(K + 1)), floored to a
/// millisecond. With k == 0 the minimum applies at once.
time_ms suspicion_timeout(size_t confirmations, size_t k, time_ms min, time_ms max);

/// Expected confirmations for a cluster of n: k, or 0 when n - 2 < k (too few
/// peers could ever confirm, so waiting for them would only use the maximum).
size_t suspicion_expected_confirmations(size_t k, size_t n);

/// The suspicion of one member: who started it, who confirmed, when it fires.
class suspicion {
 public:
  /// Starts a suspicion raised by `from` at `start`.
  suspicion(std::string from, size_t k, time_ms min, time_ms max, time_ms start);

  /// Records a confirmation; true when `from` is new (the caller re-gossips it).
  /// Confirmations past k, or from the originator, do not count.
  bool confirm(const std::string& from);

  /// Local time at which the member is declared dead.
  time_ms deadline() const { return deadline_; }

  /// Independent confirmations so far (originator excluded).
  size_t confirmations() const { return confirmers_.size(); }

 private:
  std::string from_;
  std::set<std::string> confirmers_;
  size_t k_;
  time_ms min_;
  time_ms max_;
  time_ms start_;
  time_ms deadline_;
};

} // namespace dsec::gossip
