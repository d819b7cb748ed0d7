// JSON of the shell session routes (issue 26 part 2): POST
// /v1/sandboxes/{id}/sessions {"shell","cwd","env"}, POST .../sessions/{sid}/run
// {"cmd","timeout_s"}, and the session objects they answer. Split from
// json_codec by subject.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/session.hpp"

namespace dsec::json_codec {

/// The body of a session open; every field optional (an empty body too).
struct session_open_body {
  std::string shell;
  std::string cwd;
  std::map<std::string, std::string> env;
};

/// The body of a session run.
struct session_run_body {
  std::string cmd;
  double timeout_s = 0;
};

/// Parses an open's body: unknown fields are refused, naming them.
expected<session_open_body> parse_session_open(std::string_view body);

/// Parses a run's body: "cmd" (a non-empty string, at most 1 MiB, no NUL)
/// is required, "timeout_s" is a number of seconds >= 0 (0: none).
expected<session_run_body> parse_session_run(std::string_view body);

/// {"id","shell","alive","runs","created_at","reason"}.
std::string encode(const session_info& s);
/// {"sessions":[...]}.
std::string encode(const std::vector<session_info>& list);

} // namespace dsec::json_codec
