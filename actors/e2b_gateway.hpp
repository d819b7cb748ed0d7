// The E2B API of a node, on the REST port, for the unmodified `e2b` SDK:
// the control plane (POST /v2/sandboxes, GET /v2/sandboxes, ...; e2b_control.cpp)
// and envd (Connect RPCs, GET/POST /files, GET /health; e2b_envd.cpp), which
// the SDK routes to a sandbox with the E2b-Sandbox-Id header. Every call turns
// into the same messages to the node's front actor (placement) as the native
// REST API, so a sandbox made through E2B is a dsec sandbox: same id, same
// limits, denial counters and logs, reachable from any peer of a cluster.
// Formats live in e2b_codec.hpp; HTTP stays in the gateway actor, which calls
// dispatch() first.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/http_server.hpp"
#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"
#include "api/e2b_start_cmd.hpp"
#include "core/error.hpp"

namespace dsec::e2b {

/// What the E2B handlers use of the gateway actor they run in.
struct gateway_ref {
  gateway_actor::pointer self = nullptr;
  /// The placement actor.
  placement_actor front;
  node_context_ptr ctx;
};

/// Serves `c` if it is an E2B call (an E2b-Sandbox-Id header, or a path
/// under /sandboxes or /v2/sandboxes) and returns true; false otherwise.
bool dispatch(const gateway_ref& g, const http_call& c);

/// The control plane; `seg` are the path segments, "v2" stripped.
void serve_control(const gateway_ref& g, const http_call& c, const std::vector<std::string>& seg,
                   const std::map<std::string, std::string>& query);

/// envd of sandbox `id`: `path` without the query.
void serve_envd(const gateway_ref& g, const http_call& c, const std::string& id,
                const std::string& path, const std::map<std::string, std::string>& query);

/// The envd access token the SDK gets for sandbox `id` ("" without keys).
std::string access_token(const node_config& cfg, const std::string& id);

/// E2B's error answer for a dsec error (its status; 429 with Retry-After).
void reply_error(const http_call& c, const error& err);

// -- snapshots and fork (e2b_snapshots.cpp) ---------------------------------------

/// POST /sandboxes/{id}/snapshots.
void create_snapshot(const gateway_ref& g, const http_call& c, const std::string& id);
/// GET /snapshots.
void list_snapshots(const gateway_ref& g, const http_call& c,
                    const std::map<std::string, std::string>& query);
/// DELETE /templates/{id}: an E2B snapshot.
void delete_snapshot(const gateway_ref& g, const http_call& c, const std::string& snapshot_id);
/// POST /sandboxes/{id}/fork.
void fork(const gateway_ref& g, const http_call& c, const std::string& id);

// -- metrics over time (e2b_metrics.cpp) -------------------------------------------

/// Starts sampling sandbox `info` into the node's history, unless it is already.
void watch_metrics(const gateway_ref& g, const sandbox_info& info);
/// GET /sandboxes/{id}/metrics[?start&end].
void metrics(const gateway_ref& g, const http_call& c, const std::string& id,
             const std::map<std::string, std::string>& query);
/// GET /sandboxes/metrics?sandbox_ids=...
void metrics_of_many(const gateway_ref& g, const http_call& c,
                     const std::map<std::string, std::string>& query);

// -- signed file URLs (e2b_signed_files.cpp) ---------------------------------------

/// GET/POST /files with a `signature` parameter: E2B's downloadUrl/uploadUrl
/// of a secure sandbox, answered without any header.
void serve_signed_files(const gateway_ref& g, const http_call& c, const std::string& path,
                        const std::map<std::string, std::string>& query);

// -- template builds (e2b_templates.cpp) -----------------------------------------

/// E2B's template build routes (/v3/templates, /templates/...: builds,
/// uploads, names, tags); false if `seg` is none of them.
bool serve_templates(const gateway_ref& g, const http_call& c, const std::vector<std::string>& seg,
                     const std::map<std::string, std::string>& query);
/// PUT /templates/{id}/files/{hash}?signature=...: an upload the SDK sends
/// without a header; false if `c` is not one.
bool serve_template_upload(const gateway_ref& g, const http_call& c,
                           const std::vector<std::string>& seg,
                           const std::map<std::string, std::string>& query);
/// True once the store's record of built templates is in memory.
bool templates_loaded(const gateway_ref& g);
/// Reads the record (on the worker pool) if needed, then runs `then`.
void load_templates(const gateway_ref& g, std::function<void()> then);
/// Reads the records of templates and builds at the gateway's start, so a
/// corrupt one is reported then (a node without a store has none).
void preload_templates(const gateway_ref& g);
/// What a built template's tag creates: its layer and sandbox size (0: the
/// node's default).
struct built_template_target {
  std::vector<std::string> layers;
  double cpu = 0;
  int64_t memory_mb = 0;
  /// Its start and ready commands (setStartCmd, setReadyCmd).
  std::string start_cmd;
  std::string ready_cmd;
};
/// The built template `name` or `name:tag` names (from memory).
std::optional<built_template_target> built_template(const gateway_ref& g, const std::string& id);
/// DELETE /templates/{id} of a built template (all its tags); false if `id`
/// is none.
bool delete_built_template(const gateway_ref& g, const http_call& c, const std::string& id);

// -- a template's start and ready commands (e2b_start_cmd.cpp) ---------------------

/// Runs template `t`'s start command (in the background) and waits for its
/// ready command in the new sandbox `info` (api/e2b_start_cmd.hpp), then
/// calls `done`; on a failure destroys the sandbox and answers `c` itself.
void start_template_commands(const gateway_ref& g, const http_call& c, sandbox_info info,
                             template_start t, std::function<void(sandbox_info&)> done);

/// An answer with a body and a content type.
inline void answer(const http_call& c, int status, std::string body,
                   std::string content_type = "application/json",
                   std::vector<std::pair<std::string, std::string>> headers = {}) {
  http_answer a;
  a.status = status;
  a.body = std::move(body);
  a.content_type = std::move(content_type);
  a.headers = std::move(headers);
  c->respond(std::move(a));
}

} // namespace dsec::e2b
