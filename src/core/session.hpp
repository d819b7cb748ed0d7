// Shell sessions (DSec's chronus, SWE-ReX): a long-lived shell in a sandbox
// whose runs share cwd, environment, shell variables, functions and aliases.
// This file owns what is pure about them: the text written to the shell's
// stdin for each run, and the exact cut of its output at the run's end.
//
// A run is written as
//     for _ in 1; do eval 'CMD' </dev/null; done
//     printf '%s%s:%d\n' 'HALF1' 'HALF2' "$?"; printf '%s%s\n' 'HALF1' 'HALF2' >&2
// The command is single-quoted (any byte but NUL survives), so a syntax error
// in it is eval's error, never the session's; eval runs in the shell itself,
// so `cd`, `export`, functions and aliases persist. Its stdin is /dev/null:
// the shell's own stdin is the session's script. The one-pass loop lets the
// shell's INT trap (`break`, see open_script) end the whole run the way
// Ctrl-C ends a line in a terminal. The marker is a fresh random nonce per
// run, printed from two halves, so it never appears as one piece in the
// script itself (not even echoed by `set -v` or `set -x`), and a command
// cannot print it without knowing it: the output is exactly what came before
// it, with or without a trailing newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsec {

/// A session as listed (GET .../sessions, Python's Sandbox.sessions()).
struct session_info {
  /// "s1", "s2", ... in the order the sandbox's sessions were opened.
  std::string id;
  std::string shell;
  /// False once its shell ended (`exit` inside, killed, or not stopping at a
  /// timeout); `reason` says which. Closed sessions are not listed.
  bool alive = true;
  /// Runs answered so far.
  uint64_t runs = 0;
  int64_t created_at_ms = 0;
  std::string reason;
};

namespace session_text {

/// Largest command of one run: a run is one write to the shell's stdin, which
/// reads it byte by byte; past this the run is refused (too_large).
constexpr size_t max_cmd = 1u << 20;
/// Output bytes per stream a run answers; past it the rest is dropped and the
/// result says truncated (as exec's per-stream cap).
constexpr size_t max_run_output = 16u << 20;
/// Most sessions one sandbox may have open at once (each is a shell process);
/// past it an open is refused (resource_exhausted).
constexpr size_t max_sessions = 64;

/// `s` as one POSIX single-quoted word ('\'' for each quote).
std::string quote(std::string_view s);

/// 32 random hex digits.
std::string new_nonce();

/// What the shell reads once at open: the INT trap that lets a timeout end a
/// run, alias expansion (bash), then the ready marker of `nonce`.
std::string open_script(std::string_view nonce);

/// The text of one run of `cmd` ending with the markers of `nonce`.
std::string run_script(std::string_view cmd, std::string_view nonce);

/// Why `cmd` cannot be a run's command (empty: it can).
std::string check_cmd(std::string_view cmd);

/// One stream of a run, cut exactly at its end marker. stdout's marker is
/// NONCE ':' STATUS '\n', stderr's NONCE '\n'. Keeps at most `cap` bytes of
/// output (then `truncated`), but still finds the marker past it.
class marker_cut {
 public:
  marker_cut(std::string nonce, bool with_status, size_t cap = max_run_output);

  /// Takes more of the stream; true once the marker was seen (further bytes
  /// go to rest()).
  bool feed(std::string_view data);

  bool done() const { return done_; }
  bool truncated() const { return truncated_; }
  /// The exit status the stdout marker carried (-1 before it, or on stderr).
  int status() const { return status_; }
  /// The output before the marker (all of it so far, before done()).
  std::string take_output();
  /// What came after the marker (a background job's output): the next run's.
  std::string take_rest() { return std::move(rest_); }

 private:
  void find();

  std::string marker_;
  bool with_status_;
  size_t cap_;
  std::string buf_;
  std::string rest_;
  size_t from_ = 0;
  bool done_ = false;
  bool truncated_ = false;
  int status_ = -1;
};

} // namespace session_text

} // namespace dsec
