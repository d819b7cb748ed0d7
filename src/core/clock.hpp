// Time as the node reads it, and how long each hop waits for an answer. One
// home for every call kind, so a sandbox's kill deadline and the bounds its
// callers wait with cannot drift apart.
//
// Every call crosses hops in layers, each waiting longer than the one inside
// it, so the innermost answer (the sandbox's own "timed out" result, or
// placement's "peer did not answer") reaches the caller before any outer wait
// gives up with a bare timeout:
//
//   sandbox (container/microvm)   kills an exec at exec_limit_ms
//   lifecycle -> sandbox actor    (no bound: the sandbox actor always answers)
//   placement -> peer node        hop::peer  (call_wait_peer, exec + 30 s)
//   gateway, E2B, SDK, replay     hop::front (call_wait_front, exec + 60 s)
//     -> the front door (placement, which may forward to a peer)
//
// The same rule holds for every other call kind (call, create, list, job,
// process wait, replay): each has a peer and a front bound below, the front
// one longer by at least a peer connect, and the static_asserts at the end
// check it. A front door's caller therefore always hears placement's own
// error ("node X did not answer within 120 s", actors/peer_links.hpp).
//
// An exec without a timeout (timeout_s <= 0) is waited for as long as the
// caller lives. Local asks between a node's own actors (status, reclaim,
// info) use local_wait: a node's own actor that does not answer in that time
// is stuck, and the caller goes on with what it has.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace dsec {

/// Wall-clock time in Unix milliseconds (system_clock): what created_at,
/// TTL deadlines and trajectory stamps are written in. Not monotonic: use
/// steady_clock to measure durations.
[[nodiscard]] int64_t now_ms();

/// Slack of a hop that waits on the node (or pool) that runs the command:
/// after the kill the sandbox still reports, and the answer crosses one
/// connection. Too small turns a command's own timeout into a bare call
/// timeout; too large only delays noticing a dead peer that TCP did not report.
constexpr std::chrono::milliseconds exec_slack_inner{30'000};

/// Slack of a hop whose callee may itself wait with exec_slack_inner (the
/// gateway and a replay ask the front door, which may forward to a peer):
/// twice the inner slack, so the inner error arrives first.
constexpr std::chrono::milliseconds exec_slack_outer{60'000};

/// Which hop a wait is for (see the table above).
enum class hop {
  /// placement -> a peer's placement (the owner of a sandbox, a create's
  /// candidate, a peer's part of a list or job).
  peer,
  /// a client of the front door: the gateway (REST and E2B), the native SDK,
  /// a replay; the front door may itself wait on a peer.
  front,
};

/// Bound on a call that is not an exec (create, file, pause, snapshot, ...)
/// at the peer hop: a create waits for the remote backend (a VM boot under
/// TCG, a layer fetch), generous since a dead peer fails calls at once anyway.
constexpr std::chrono::milliseconds call_wait_peer{120'000};
/// The same at the front hop: the peer bound and 60 s, so placement's own
/// error ("node X did not answer") reaches the caller first.
constexpr std::chrono::milliseconds call_wait_front{180'000};
/// Bound on connecting to a peer (TCP and CAF handshake).
constexpr std::chrono::milliseconds connect_wait{5'000};
/// Bound on one peer's part of a cluster-wide list, status or view: a peer
/// that does not answer in time is left out rather than failing the list.
constexpr std::chrono::milliseconds list_wait_peer{5'000};
/// The same at the front hop: a peer's connect, its bound and 5 s, so a
/// slow peer is left out of the list rather than failing it.
constexpr std::chrono::milliseconds list_wait_front{15'000};
/// Bound on an ask between a node's own actors that should answer at once
/// (status, info with live counters, reclaim's sample, a relay's drain).
constexpr std::chrono::milliseconds local_wait{10'000};

/// How long `h` waits for a call that is not an exec.
[[nodiscard]] constexpr std::chrono::milliseconds call_wait(hop h) {
  return h == hop::peer ? call_wait_peer : call_wait_front;
}
/// Bound on a create at the front hop: placement walks up to its candidates
/// (each a peer hop of call_wait_peer), so the front waits for two such
/// attempts in full and a slack; a walk past that is rare (every candidate
/// timed out) and ends in the caller's timeout. Too small turns a slow VM
/// boot behind one refusal into a bare timeout.
constexpr std::chrono::milliseconds create_wait_front{300'000};
/// Bound on the native SDK connecting to a front door (TCP and CAF
/// handshake, maybe across a WAN): longer than a peer's connect_wait.
constexpr std::chrono::milliseconds connect_wait_front{10'000};
/// Bound on asking a peer what it holds of a layer ref (a manifest read).
constexpr std::chrono::milliseconds layer_probe_wait{10'000};
/// Bound on reading one chunk of an image from a peer (up to a few MiB from
/// its disk): a peer slower than this is dropped for the next one.
constexpr std::chrono::milliseconds chunk_wait{30'000};
/// How long a create's worker waits for a layer fetched from peers (a large
/// image over a slow link); the fetch itself fails earlier when every peer
/// fails (layer_probe_wait, chunk_wait each).
constexpr std::chrono::milliseconds layer_fetch_wait{600'000};
/// Bound on a replay forwarded to the source's owner, which re-runs a whole
/// trajectory (every exec waits its own timeout): hours, never unbounded.
constexpr std::chrono::milliseconds replay_wait_peer{6 * 3'600'000};
/// The same at the front hop: the peer bound and 60 s.
constexpr std::chrono::milliseconds replay_wait_front{replay_wait_peer + exec_slack_outer};
/// Bound on a node's orderly stop (every sandbox destroyed, ~500/s): past
/// it the node stops anyway and the next start on the state dir reaps the rest.
constexpr std::chrono::milliseconds shutdown_wait{120'000};

/// How long `h` waits for a create (see create_wait_front).
[[nodiscard]] constexpr std::chrono::milliseconds create_wait(hop h) {
  return h == hop::peer ? call_wait_peer : create_wait_front;
}
/// How long `h` waits for a replay (see replay_wait_peer).
[[nodiscard]] constexpr std::chrono::milliseconds replay_wait(hop h) {
  return h == hop::peer ? replay_wait_peer : replay_wait_front;
}
/// How long `h` waits for a cluster-wide list or view.
[[nodiscard]] constexpr std::chrono::milliseconds list_wait(hop h) {
  return h == hop::peer ? list_wait_peer : list_wait_front;
}
/// How long `h` waits for a job-wide pause or resume (every sandbox of a
/// job on a peer pauses in parallel; the peer's own walk takes call_wait).
[[nodiscard]] constexpr std::chrono::milliseconds job_wait(hop h) {
  return call_wait(h) + std::chrono::milliseconds{30'000};
}
/// How long `h` waits for a call that itself waits up to `wait_ms` (a
/// process wait): the wait plus the call bound.
[[nodiscard]] constexpr std::chrono::milliseconds call_wait_after(hop h, int64_t wait_ms) {
  return call_wait(h) + std::chrono::milliseconds{wait_ms > 0 ? wait_ms : 0};
}

/// An exec's own time limit in milliseconds, rounded up (the sandbox never
/// kills early); 0 when there is none (timeout_s <= 0 or NaN).
[[nodiscard]] int64_t exec_limit_ms(double timeout_s);

/// How long a hop waits for an exec's answer: exec_limit_ms(timeout_s) plus
/// `slack`; nullopt (no bound) when the exec has no limit.
[[nodiscard]] std::optional<std::chrono::milliseconds>
exec_wait(double timeout_s, std::chrono::milliseconds slack);

/// How long hop `h` waits for an exec's answer: the limit plus
/// exec_slack_inner (peer) or exec_slack_outer (front); nullopt: no bound.
[[nodiscard]] std::optional<std::chrono::milliseconds> exec_wait(double timeout_s, hop h);

// The rule of this file, checked where it is written: an outer hop waits
// longer than the hop inside it.
static_assert(call_wait_front > call_wait_peer);
static_assert(list_wait_front > list_wait_peer);
static_assert(exec_slack_outer > exec_slack_inner);
static_assert(call_wait_peer > connect_wait);
static_assert(create_wait_front > call_wait_front);
static_assert(replay_wait_front > replay_wait_peer);
static_assert(connect_wait_front > connect_wait);
// A front door's list and info waits outlast placement's own peer waits, so
// a slow peer yields placement's error (or a list without it), not a bare
// timeout at the caller.
static_assert(list_wait_front > list_wait_peer + connect_wait);
static_assert(call_wait_front > call_wait_peer + connect_wait);

} // namespace dsec
