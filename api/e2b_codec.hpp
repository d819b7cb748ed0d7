// The E2B wire formats, as the unmodified `e2b` SDK (npm 2.x) speaks them:
// the control plane's JSON (POST /v2/sandboxes, GET /v2/sandboxes, ...), its
// error shape `{"code":404,"message":"..."}`, and envd's Connect protocol with
// the JSON codec (5-byte envelopes for streams, `{"code":"not_found",...}`
// errors), the process and filesystem messages, and multipart uploads.
// Pure functions: no CAF, no Beast, so unit tests take every hostile input.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/fs_entry.hpp"
#include "core/types.hpp"

namespace dsec::e2b {

/// The envd version we claim: the SDK gates features on it (its
/// envd/versions.ts). 0.6.4 is what is implemented here: Start/Connect/List/
/// SendSignal/SendInput/CloseStdin (0.5.2), octet-stream and gzip uploads
/// (0.5.7), file metadata as user.e2b.* xattrs (0.6.2), entry info in watch
/// events (0.6.3) and `allowNetworkMounts` on a watch (0.6.4: a sandbox has
/// no network mounts, so there is nothing to refuse), over the filesystem
/// RPCs and multipart uploads of earlier versions.
constexpr const char* envd_version = "0.6.4";
/// The port the SDK names in E2b-Sandbox-Port for envd.
constexpr const char* envd_port = "49983";
/// Label that keeps the templateID a sandbox was created from (hidden from
/// E2B metadata, visible in the native API).
constexpr const char* template_label = "e2b.template";
/// Sandbox lifetime when a create names none (E2B's default, 5 minutes).
constexpr int64_t default_timeout_s = 300;

// -- control plane ------------------------------------------------------------

/// POST /sandboxes and /v2/sandboxes.
struct create_request {
  std::string template_id;
  int64_t timeout_s = default_timeout_s;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env;
  /// Set from a built template (actors/e2b_templates.cpp), not the body:
  /// its cpuCount and memoryMB; 0 = the node's default.
  double template_cpu = 0;
  int64_t template_memory_mb = 0;
};

[[nodiscard]] expected<create_request> parse_create(std::string_view body);

/// The layers a templateID names: a layer ref (`base/python@3.11`) as is,
/// or an alias: `base` and `python` = base/python@3.11 (Debian with bash and
/// python 3.11, the nearest to E2B's base image), `busybox` = base/busybox@1, `code-interpreter-v1` (the
/// @e2b/code-interpreter SDK's default) = base/code-interpreter@1.
/// The store's own aliases (layers/aliases.hpp) are looked up before this.
[[nodiscard]] expected<std::vector<std::string>> template_layers(const std::string& template_id);

/// `{"timeout": N}` of POST .../timeout and .../connect (absent = -1).
[[nodiscard]] expected<int64_t> parse_timeout(std::string_view body);

/// A sandbox as E2B's API answers it (create, connect, get, list items).
/// `access_token`: the envd token (omitted when empty).
std::string encode_sandbox(const sandbox_info& info, const std::string& access_token);
std::string encode_sandbox_list(const std::vector<sandbox_info>& list);
/// GET /sandboxes/{id}/metrics: E2B's SandboxMetric array (timestamp,
/// cpuCount, cpuUsedPct, memUsed, memTotal; bytes), here one sample.
std::string encode_metrics(const sandbox_metric& m);

/// E2B's error body `{"code":<status>,"message":...}`.
std::string error_body(int status, std::string_view message);
/// HTTP status for a dsec error on the control plane.
int http_status(errc code);

/// GET /v2/sandboxes query: metadata (one parameter, `k=v&k2=v2` encoded
/// again), state (comma list), limit, nextToken, order (asc | desc, by start
/// time; default desc), startedAfter (RFC 3339, inclusive), template (the
/// templateID a sandbox was created with). Any other parameter is refused.
struct list_query {
  std::map<std::string, std::string> metadata;
  std::vector<std::string> states;
  size_t limit = 100;
  size_t offset = 0;
  bool ascending = false;
  std::optional<int64_t> started_after_ms;
  std::string template_id;
};

[[nodiscard]] expected<list_query> parse_list_query(const std::map<std::string, std::string>& q);

/// Applies the filters and the page; sets `next_token` when more follow.
std::vector<sandbox_info> select_page(std::vector<sandbox_info> all, const list_query& q,
                                      std::string& next_token);

// -- Connect protocol -----------------------------------------------------------

/// Connect's code name for a dsec error ("not_found", ...).
const char* connect_code(errc code);
/// HTTP status of a unary Connect error with that code.
int connect_status(const char* code);
/// `{"code":..,"message":..}` (unary error body / end-of-stream error).
std::string connect_error(const char* code, std::string_view message);

/// One envelope: flags byte, big-endian length, payload.
std::string envelope(uint8_t flags, std::string_view payload);
/// The end-of-stream envelope (flags 0x02): `{}` or `{"error":...}`.
std::string end_of_stream(const char* code = nullptr, std::string_view message = {});

/// The one message of a server-streaming request (a single envelope with
/// flags 0; compressed or oversized ones are refused).
[[nodiscard]] expected<std::string> unwrap_request(std::string_view body);

// -- process.Process -------------------------------------------------------------

/// StartRequest: the command to run (`/bin/bash -l -c CMD` from the SDK
/// becomes a /bin/sh wrapper that uses bash when the layers have it).
/// `keep_stdin`: the request's `stdin` (true: stdin stays open for SendInput).
/// `home`: where a relative cwd starts (E2B: the calling user's home).
[[nodiscard]] expected<exec_request> parse_start(std::string_view json, bool& pty,
                                                 bool* keep_stdin = nullptr,
                                                 std::string_view home = "/");

/// SendInputRequest: pid and the stdin bytes (base64 in JSON); a pty input is
/// invalid_argument (no PTYs).
[[nodiscard]] expected<std::pair<int32_t, std::string>> parse_input(std::string_view json);

/// Standard base64 (padding optional); invalid_argument on other characters.
[[nodiscard]] expected<std::string> unbase64(std::string_view text);

/// The pid of a ProcessSelector in `{"process":{"pid":N}}` (tags unsupported).
[[nodiscard]] expected<int32_t> parse_selector(std::string_view json);

/// SendSignalRequest: pid and signal number (enum name or number).
[[nodiscard]] expected<std::pair<int32_t, int32_t>> parse_signal(std::string_view json);

std::string start_event(int32_t pid);
/// stream 1 stdout, 2 stderr.
std::string data_event(int stream, std::string_view bytes);
std::string end_event(const exec_result& res);
std::string keepalive_event();

/// ListResponse of the sandbox's background commands.
std::string encode_process_list(const std::vector<process_info>& procs);

// -- filesystem.Filesystem ---------------------------------------------------------

/// `path` of Stat/MakeDir/Remove/ListDir (+ depth), or Move's source and
/// destination. Relative paths are taken from "/".
struct fs_request {
  std::string path;
  std::string to;
  int32_t depth = 1;
  /// WatchDir's includeEntry (envd 0.6.3): each event carries its entry.
  bool include_entry = false;
};

/// `home`: where relative paths start (E2B: the calling user's home).
[[nodiscard]] expected<fs_request> parse_fs(std::string_view json, bool move,
                                          std::string_view home = "/");

/// WatchDirRequest: the directory and how deep (recursive = 16 levels),
/// includeEntry; allowNetworkMounts is accepted either way (a sandbox has
/// no network mounts to refuse).
[[nodiscard]] expected<fs_request> parse_watch(std::string_view json,
                                             std::string_view home = "/");
/// A WatchDirResponse filesystem event; `type` an EventType name.
std::string watch_event(const std::string& name, const char* type);

/// EntryInfo as JSON; a symlink's target resolved to an absolute path.
/// User and group names by id, from the sandbox's /etc/passwd and /etc/group
/// (api/e2b_user.hpp); an id without a name shows as its number, 0 as root.
struct owner_names {
  std::map<uint32_t, std::string> users;
  std::map<uint32_t, std::string> groups;
};
std::string encode_entry(const fs_entry& e, const owner_names* names = nullptr);
/// A watch event with its entry (envd 0.6.3, WatchDir's includeEntry).
std::string watch_event(const std::string& name, const char* type, const fs_entry& entry,
                        const owner_names* names);
/// A symlink's target as E2B's envd answers it: absolute, "." and ".."
/// resolved against the link's directory (lexically: one hop, not a chain).
std::string resolved_link(const std::string& path, const std::string& target);
/// ListDir's order in E2B's envd (Go's filepath.WalkDir): lexical pre-order,
/// each directory followed by what is below it.
void sort_walk_order(std::vector<fs_entry>& v);
/// `{"entry":...}`.
std::string encode_entry_response(const fs_entry& e, const owner_names* names = nullptr);
/// `{"entries":[...]}`.
std::string encode_entries(const std::vector<fs_entry>& v, const owner_names* names = nullptr);

/// An absolute sandbox path from an envd `path` (relative = from "/").
/// `home` (absolute) is where a relative path starts, as E2B's envd resolves
/// relative paths in the calling user's home.
[[nodiscard]] expected<std::string> sandbox_path(std::string_view path,
                                                std::string_view home = "/");

// -- GET/POST /files -------------------------------------------------------------------

/// One uploaded file: its target path and bytes.
struct upload {
  std::string path;
  std::string data;
};

/// The files of a multipart/form-data body (parts named "file"); a part's
/// filename is its path unless `query_path` is given (one file).
[[nodiscard]] expected<std::vector<upload>> parse_multipart(std::string_view content_type,
                                                            std::string_view body,
                                                            const std::string& query_path,
                                                            std::string_view home = "/");

/// `[{"name","type":"file","path"}...]` answered by POST /files.
std::string encode_written(const std::vector<std::string>& paths);

std::string base64(std::string_view bytes);

// -- terminals (process.Process with a pty; e2b_codec_pty.cpp) --------------------

/// The (cols, rows) of a StartRequest's pty.size.
[[nodiscard]] expected<std::pair<int32_t, int32_t>> parse_start_pty(std::string_view json);
/// UpdateRequest: (pid, cols, rows) of a pty resize; anything else is refused.
[[nodiscard]] expected<std::tuple<int32_t, int32_t, int32_t>> parse_update(std::string_view json);
/// SendInputRequest with input.pty: (pid, bytes); nullopt if its input is stdin.
[[nodiscard]] expected<std::optional<std::pair<int32_t, std::string>>> parse_pty_input(
  std::string_view json);
/// A data event carrying terminal output.
std::string pty_data_event(std::string_view bytes);

} // namespace dsec::e2b
