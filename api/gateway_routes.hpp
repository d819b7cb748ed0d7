// The REST routes of the gateway as one pure function from (method, target)
// to a typed action, in the manner of Firecracker's API server: HTTP stops
// here, the gateway actor dispatches on `route::kind`. No CAF, no Beast, so it
// is unit-tested on its own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec {

/// What a request asks for.
struct route {
  enum kind_t {
    healthz,
    metrics,
    list_layers,
    list_nodes,
    create,
    create_batch,
    list_sandboxes,
    get_sandbox,
    delete_sandbox,
    exec,
    put_file,
    get_file,
    pause,
    resume,
    snapshot,
    set_network,
    fncall,
    list_processes,
    get_process,
    kill_process,
    update_sandbox,
    pause_job,
    resume_job,
    trajectory,
    replay,
    sandbox_metrics,
    /// GET .../processes/{pid}?follow=1: NDJSON as it comes (push streams,
    /// issue 24 part 2; actors/gateway_procs.hpp).
    follow_process,
    /// Terminals (issue 26 part 1; actors/gateway_pty.hpp).
    pty_open,
    pty_get,
    pty_input,
    pty_resize,
    pty_kill,
    /// Shell sessions (issue 26 part 2; actors/gateway_session.hpp).
    session_open,
    session_list,
    session_run,
    session_close,
  };
  kind_t kind = healthz;
  /// Sandbox id for per-sandbox routes.
  std::string id;
  /// Process id (inside the sandbox) for the per-process routes.
  int32_t pid = 0;
  /// Session id for the per-session routes ({sid}).
  std::string session;
  /// Decoded query parameters (last value wins), except `label`.
  std::map<std::string, std::string> query;
  /// Decoded `label=k=v` parameters.
  std::map<std::string, std::string> labels;
};

/// Maps a request to a route: not_found for an unknown path, invalid_argument
/// (HTTP 405 is chosen by the caller via `method_not_allowed`) for a known path
/// with another method, invalid_argument for a malformed query.
expected<route> parse_route(std::string_view method, std::string_view target,
                            bool& method_not_allowed);

/// The non-empty segments of a path ("/a//b/" -> a, b).
std::vector<std::string_view> split_path(std::string_view path);

/// The key=value items of a query string, percent-decoded, in order (an item
/// without '=' has an empty value); invalid_argument names an undecodable one.
expected<std::vector<std::pair<std::string, std::string>>> query_items(std::string_view q);

/// Percent-decoding of a URL component ('+' stays '+'); invalid escapes fail.
expected<std::string> url_decode(std::string_view s);

/// HTTP status for an error code.
int http_status_of(errc code);

} // namespace dsec
