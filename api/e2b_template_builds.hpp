// E2B template builds as a node keeps them across its restarts (issue 27):
// every build's template, tags, size, status, failure and log, written to
// <state-dir>/e2b_template_builds.json at each change of status (atomic
// rename) and read back at start, so GET .../builds/{id}/status answers
// after a restart as before it. A build that was running when its node
// stopped died with it (its builder is the node's child): it comes back as
// `error`, saying so. A build not yet started stays `waiting` and can be
// started. Pure file and JSON work, no CAF, for unit tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "api/e2b_templates.hpp"
#include "core/error.hpp"

namespace dsec::e2b {

/// One build: requested (`waiting`), then `building`, then `ready` or `error`.
struct template_build {
  std::string id;
  std::string template_name;
  std::vector<std::string> tags;
  double cpu = 0;
  int64_t memory_mb = 0;
  std::string status = "waiting";
  std::vector<build_log> logs;
  std::string reason;
  std::string step;
  /// When it was requested (Unix ms): the oldest finished builds are the
  /// first dropped from the record.
  int64_t created_at_ms = 0;
  /// Its node stopped under it (it was `building` in the record read at
  /// start, or its builder lost the node), so its step sandboxes may still
  /// run: the next start destroys them and clears this.
  bool interrupted_at_load = false;
};

using build_map = std::map<std::string, template_build>;

/// The record keeps this many builds, the newest (a node that builds all day
/// keeps a bounded file; an older build's status answers 404, as an unknown one).
inline constexpr size_t max_recorded_builds = 256;
/// ... and this many log lines of each, the last ones (an apt install logs
/// thousands; the status of a finished build needs its end).
inline constexpr size_t max_recorded_log_lines = 2000;

/// Why a build that was running when its node stopped is an error.
inline constexpr const char* interrupted_reason =
  "the node stopped during this build (its builder stopped with it); build again";

/// <state_dir>/e2b_template_builds.json.
std::string builds_record_path(const std::string& state_dir);

/// The record's text for `all` (bounded as above).
std::string encode_builds(const build_map& all);

/// The builds in a record's text; `building` ones become `error`
/// (interrupted_reason). Text that is not such a record is an error naming
/// `path` and what is wrong.
[[nodiscard]] expected<build_map> decode_builds(std::string_view text, const std::string& path);

/// Blocking: the record at `path`; none when there is no file.
[[nodiscard]] expected<build_map> read_builds(const std::string& path);

/// Blocking: replaces the record at `path` by `text` (temp file + rename).
[[nodiscard]] status write_builds(const std::string& path, const std::string& text);

} // namespace dsec::e2b
