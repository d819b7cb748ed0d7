// TTL over pauses, as pure functions: a sandbox's ttl_s counts running time
// only. Pausing stops the clock (the time left is kept, expires_at is
// cleared), resuming starts it again (expires_at = now + time left), and a
// paused sandbox is kept at most paused_ttl_s. The sandbox actor applies them
// (actors/sandbox_ttl.hpp); the codecs and the bindings read the fields back
// through remaining_ms(). Times are Unix milliseconds.
//
// Also the reader of the TTL file a node before record version 2 kept beside
// its record (`<sandbox dir>/ttl.json`); the TTL state now lives in the one
// sandbox record (json_codec::sandbox_record), which folds such a file in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::ttl {

/// Running time left at `now_ms` of a TTL that ends at `expires_at_ms`
/// (never below 0); 0 if there is no TTL (expires_at_ms == 0).
[[nodiscard]] int64_t left_at(int64_t expires_at_ms, int64_t now_ms);

/// When a sandbox resumed at `now_ms` with `left_ms` of running time expires.
[[nodiscard]] int64_t expires_after_resume(int64_t left_ms, int64_t now_ms);

/// When a sandbox paused at `paused_at_ms` is destroyed unless resumed.
[[nodiscard]] int64_t paused_deadline(int64_t paused_at_ms, int64_t paused_ttl_s);

/// The running time the TTL of `info` has left at `now_ms`, ms; -1 = no TTL.
/// Paused: the time left at the pause (it stands still). Running (or failed):
/// expires_at - now. Creating: the whole ttl_s.
[[nodiscard]] int64_t remaining_ms(const sandbox_info& info, int64_t now_ms);

/// What a version 1 node's `<sandbox dir>/ttl.json` holds: the TTL state
/// since the last pause or resume (absent until the first pause: the
/// record's expiry holds).
struct file_state {
  /// 0 = running; else when it was paused.
  int64_t paused_at_ms = 0;
  /// Paused: running time left, ms.
  int64_t left_ms = 0;
  /// Running: when the TTL ends (0 = none).
  int64_t expires_at_ms = 0;
};

/// `{"version":1,"paused_at_ms":...,"left_ms":...,"expires_at_ms":...}`,
/// the old form (tests write it to check a restarted node still adopts it).
std::string encode(const file_state& f);

/// Reads encode(file_state) back; invalid_argument naming what is wrong.
expected<file_state> decode(std::string_view body);

/// The old file's name in the sandbox dir.
inline constexpr const char* file_name = "ttl.json";

} // namespace dsec::ttl
