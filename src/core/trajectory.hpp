// The trajectory log's vocabulary: one record per thing that happened to a
// sandbox (its spec, each exec, each file write, a rebuild, its end), how a
// record reads as one JSON line, and the pure rules around it: what a valid
// step key is, when a new exec request is the same step as a logged one, and
// whether content is kept inline, as a blob, or by digest only.
//
// The log itself (files, blobs, the serial writer) is journal/trajectory_store.hpp;
// the sandbox actor's use of it is actors/sandbox_trajectory.hpp.
//
// A line, by kind (every line has "seq", "kind", "at" in Unix seconds):
//   spec:      {"id","node","spec":{...as POST /v1/sandboxes}}  (always seq 0)
//   exec:      {"step"?,"cmd":[argv],"cwd","env","stdin":content,"timeout_s",
//               "exit_code","stdout":content,"stderr":content,"timed_out",
//               "truncated","duration_ms"}  ("at" = start time)
//   file:      {"path","size","digest","content":content}
//   rebuilt:   {"source","upto_seq"}  (this sandbox was rebuilt from source's log)
//   destroyed: {"reason"}
// where content = {"size","digest","text"?,"blob"?:true,"kept"?:false}:
// "text" when it is small UTF-8, "blob" when it sits in the log's blobs/
// by digest, "kept": false when it was over the cap (digest and size only).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::trajectory {

/// Limits of the log. Each says why its value and which way it fails.
struct limits {
  /// Longest step key. 128 fits "rollout-<uuid>/turn-<n>" with room; longer
  /// keys are refused (400), never cut.
  static constexpr size_t max_step = 128;
  /// Content up to this size that is valid UTF-8 stays inline in its line, so
  /// a reader needs no second fetch for the common small output; above it,
  /// or not UTF-8, it goes to a content-addressed blob beside the log.
  static constexpr size_t default_inline_max = 4096;
  /// Largest content kept as a blob (a file write, stdin, an exec's output;
  /// exec output is itself capped at 16 MiB a stream, so it is always kept).
  /// Above it only the digest and size are logged, and a replay that needs
  /// that content refuses (409) rather than rebuild a different sandbox.
  static constexpr size_t default_blob_max = 64u << 20;
};

/// How the log keeps one piece of content.
enum class keep { inline_text, blob, digest_only };

/// The rule above: inline if small and UTF-8, a blob up to blob_max, else
/// digest only.
keep keep_for(std::string_view data, size_t inline_max, size_t blob_max);

/// Content as a record holds it. `data` is the bytes when known (inline
/// text, or loaded from the blob); `digest` is "sha256:<hex>" of them.
struct content {
  int64_t size = 0;
  std::string digest;
  keep how = keep::inline_text;
  std::string data;
};

/// One line of the log.
struct record {
  uint64_t seq = 0;
  /// "spec" | "exec" | "exit" | "file" | "rebuilt" | "destroyed". A
  /// background command is an "exec" with `background` set, logged when it
  /// starts (no result), and an "exit" with its pid and result when it ends.
  std::string kind;
  /// Unix ms (an exec's start time).
  int64_t at_ms = 0;
  // -- spec ---------------------------------------------------------------------
  std::string id;
  std::string node;
  sandbox_spec spec;
  // -- exec ---------------------------------------------------------------------
  std::string step;
  std::vector<std::string> argv;
  std::string cwd;
  std::map<std::string, std::string> env;
  content stdin_data;
  double timeout_s = 0;
  int32_t exit_code = 0;
  content stdout_data;
  content stderr_data;
  bool timed_out = false;
  bool truncated = false;
  double duration_ms = 0;
  /// A background command (exec: started; exit: ended) and its pid.
  bool background = false;
  int32_t pid = 0;
  // -- file ---------------------------------------------------------------------
  std::string path;
  content file;
  // -- rebuilt ------------------------------------------------------------------
  std::string source;
  uint64_t upto_seq = 0;
  // -- destroyed ----------------------------------------------------------------
  std::string reason;
  // -- session_open | session_run | session_close (issue 26 part 2) ------------
  /// A shell session's id: session_open's shell is argv[0] (cwd, env as an
  /// exec's), session_run's command argv[0] with an exec's result fields.
  std::string session;
};

/// The record as one JSON line (no newline). Content kept as a blob or by
/// digest only is written without its bytes.
std::string encode(const record& r);

/// Reads a line written by encode(). Unknown fields are ignored (a newer
/// node may add some); a line that is not a record is invalid_argument.
expected<record> decode(std::string_view line);

/// Checks a step key: 1-128 bytes of [A-Za-z0-9._:/@+=-] (no spaces, no
/// control bytes, nothing a shell or a path would need quoted).
status validate_step(std::string_view step);

/// What differs between the logged step `logged` and a new request with the
/// same key, by field name ("cmd", "cwd", "env", "stdin"); empty = the same
/// request. `stdin_digest` is the new request's stdin digest.
std::vector<std::string> step_differences(const record& logged, const exec_request& req,
                                          const std::string& stdin_digest);

/// The 409 of a changed step: names the step, the sandbox and each field
/// that differs with its logged and new value (shortened).
error step_conflict(const std::string& sandbox_id, const record& logged,
                    const exec_request& req, const std::vector<std::string>& fields);

/// The recorded answer of an exec record (`replayed` set), from content
/// whose `data` has been loaded.
exec_result result_of(const record& r);

/// A seq in a query (`since`, `upto_seq`): a whole number 0..2^53;
/// invalid_argument naming `field` otherwise.
expected<int64_t> parse_seq(std::string_view field, std::string_view text);

/// The body of POST .../replay: empty, or `{"upto_seq": N}`; -1 = the whole log.
expected<int64_t> parse_replay(std::string_view body);

/// True if `s` is valid UTF-8.
bool valid_utf8(std::string_view s);

} // namespace dsec::trajectory
