// Time as the node reads it, and how long each hop waits for an exec's
// answer. One home for both, so a sandbox's kill deadline and the bounds its
// callers wait with cannot drift apart.
//
// An exec with timeout_s runs in layers, each waiting longer than the one
// inside it, so the innermost answer (the sandbox's own "timed out" result)
// reaches the caller before any outer wait gives up with a bare timeout:
//
//   sandbox (container/microvm)   kills the command at exec_limit_ms
//   placement -> peer node        waits limit + exec_slack_inner (30 s)
//   SDK (native client) -> node   waits limit + exec_slack_inner (30 s)
//   gateway, replay -> front door waits limit + exec_slack_outer (60 s)
//
// An exec without a timeout (timeout_s <= 0) is waited for as long as the
// caller lives.
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

/// An exec's own time limit in milliseconds, rounded up (the sandbox never
/// kills early); 0 when there is none (timeout_s <= 0 or NaN).
[[nodiscard]] int64_t exec_limit_ms(double timeout_s);

/// How long a hop waits for an exec's answer: exec_limit_ms(timeout_s) plus
/// `slack`; nullopt (no bound) when the exec has no limit.
[[nodiscard]] std::optional<std::chrono::milliseconds>
exec_wait(double timeout_s, std::chrono::milliseconds slack);

} // namespace dsec
