// JSON codecs of the public API: strict parsers for what callers send (every
// wrong type, unknown field or absurd value is an invalid_argument naming the
// field) and encoders for what the node answers. The gateway and the CLI use
// them; nothing else speaks JSON.
//
// Split by mechanism: json_codec.cpp parses requests (over the strict field
// readers of json_codec_fields.hpp), json_codec_encode.cpp encodes answers,
// json_codec_decode.cpp reads answers back for clients, json_codec_record.cpp
// is the on-disk sandbox record; _procs, _update, _ttl and _job by subject.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::json_codec {

/// Parses and validates a sandbox spec (POST /v1/sandboxes body).
expected<sandbox_spec> parse_spec(std::string_view body);

/// Parses a batch create body `{"spec": {...}, "count": N}`.
expected<std::pair<sandbox_spec, int>> parse_batch(std::string_view body);

/// Parses and validates an exec request (POST /v1/sandboxes/{id}/exec body).
/// `cmd` may be a string (run by /bin/sh -c) or an argv array.
expected<exec_request> parse_exec(std::string_view body);

/// PUT /v1/sandboxes/{id}/network: {"mode":"none"} or {"allow":["host:port",...]}.
expected<network_policy> parse_network_policy(std::string_view body);

/// PATCH /v1/sandboxes/{id}: what to change on a running sandbox, applied
/// together (cpu class first, then network). json_codec_update.cpp.
struct sandbox_update {
  /// "latency" | "batch"; empty = unchanged.
  std::string cpu_class;
  /// Whether `network` replaces the allow-list.
  bool set_network = false;
  network_policy network;
};
/// `{"cpu_class": "batch"|"latency", "network": {...as PUT .../network}}`,
/// at least one of them; unknown keys, a bad class or policy, an empty body
/// are invalid_argument naming the field.
expected<sandbox_update> parse_update(std::string_view body);
/// The answer of PATCH: the sandbox info plus `"applied": ["cpu_class",
/// "network"]` (what the update changed, in the order applied).
std::string encode_update(const sandbox_info& info, const sandbox_update& applied);

/// POST /v1/sandboxes/{id}/snapshot: an empty body or {"name","version"}.
struct snapshot_request {
  std::string name;
  std::string version;
};
expected<snapshot_request> parse_snapshot(std::string_view body);

/// POST /v1/sandboxes/{id}/pause: an empty body or {"keep_memory": bool}
/// (default true); whether the pause keeps the memory.
expected<bool> parse_pause(std::string_view body);

/// POST /v1/fncall: {"language","code","stdin","timeout_s","files"}.
expected<fncall_request> parse_fncall(std::string_view body);

std::string encode(const snapshot_info& s);

/// GET /v1/sandboxes/{id}/metrics: timestamp_ms, cpu_count, cpu_used_pct,
/// mem_used_bytes, mem_total_bytes.
std::string encode(const sandbox_metric& m);
std::string encode(const sandbox_info& info);
/// `{"sandboxes":[...]}`.
std::string encode(const std::vector<sandbox_info>& list);
std::string encode(const exec_result& res);
/// One NDJSON event line (with trailing newline) for streamed exec output:
/// `{"type":"stdout"|"stderr","data":"..."}`.
std::string encode_event(const exec_chunk& chunk);
/// The final NDJSON event: `{"type":"exit", ...exec_result}`.
std::string encode_exit_event(const exec_result& res);
/// `{"layers":[...]}`.
std::string encode(const std::vector<layer_info>& list);
/// GET /healthz: `{"status":"ok","node","version","sandboxes","creating","uptime_s","pid",
/// "backends":{"<name>":{"available", "reason" (when not), "accel", "accel_reason" (VMs)}}}`.
std::string encode(const node_status& st);
/// `{"nodes":[{"id","address","state","incarnation","load":{"free_memory_mb",
/// "cpu_load","sandboxes","creating","accepting","layers"}}]}`: the cluster view.
std::string encode_nodes(const std::vector<member_info>& members);
/// `{"id":"...","deleted":true|false}`.
std::string encode_deleted(const std::string& id, bool existed);
/// `{"path":"...","size":N}` after a file upload.
std::string encode_file_written(const std::string& path, size_t size);
/// `{"error":{"code":"...","message":"..."}}`.
std::string encode(const error& err);
/// Batch create answer: created sandboxes and per-item errors.
std::string encode_batch(const std::vector<sandbox_info>& created,
                         const std::vector<error>& errors);

// -- processes (json_codec_procs.cpp) ------------------------------------------

/// A background command: `{"pid","cmd","argv","started_at","state":"running"|
/// "exited","exit_code" (null while running),"stdout","stderr","timed_out",
/// "truncated","duration_ms"}`.
std::string encode(const background_process& p);
/// `{"processes":[{"pid","ppid","cmd","argv","name","state","started_at",
/// "background"}]}`.
std::string encode(const std::vector<process_info>& list);
/// A signal given as a number (1..64) or a name ("SIGTERM", "TERM"); names
/// are the Linux ones.
expected<int32_t> parse_signal_value(std::string_view text);
/// The body of POST .../processes/{pid}/kill: `{"signal": 9 | "SIGTERM"}`;
/// an empty body or no field means SIGKILL.
expected<int32_t> parse_kill(std::string_view body);
/// Reads encode(background_process) back (the CLI).
expected<background_process> decode_background(std::string_view body);

/// Decoders for clients (CLI, bench): tolerant of unknown fields.
expected<sandbox_info> decode_sandbox(std::string_view body);
expected<std::vector<sandbox_info>> decode_sandboxes(std::string_view body);
expected<exec_result> decode_exec_result(std::string_view body);
expected<std::vector<layer_info>> decode_layers(std::string_view body);
/// Reads `{"error":{...}}`; a body that is not one gives an internal error
/// quoting the body's start.
error decode_error(std::string_view body, int http_status);

// -- the sandbox record ---------------------------------------------------------

/// What a node keeps on disk for each sandbox it runs, in one file
/// (`<state>/sandboxes/<id>/record.json`, written whole, atomically: temp +
/// rename) so that the next node process on the same state dir can adopt it:
/// the spec, the times, the layer mounts it holds, the class a PATCH moved it
/// to and its TTL state over pauses (core/ttl.hpp). A node before version 2
/// kept the TTL state apart, in `ttl.json` (ttl::file_state); merge_ttl_file
/// folds one in. The backend's own handle on the sandbox (a container's
/// `meta`: init's pid and where its root is) is the backend's, written
/// before this record exists.
struct sandbox_record {
  std::string id;
  sandbox_spec spec;
  int64_t created_at_ms = 0;
  /// When the TTL ends, as of the last pause, resume or new TTL; 0 = no TTL
  /// running (none, or paused).
  int64_t expires_at_ms = 0;
  /// Layer digests (`sha256:<hex>`) whose mounts the sandbox holds, spec order.
  std::vector<std::string> digests;
  /// The CPU class it runs in now, when a PATCH changed it from
  /// spec.cpu_class (the spec stays as created, for request_id matching);
  /// empty = the spec's.
  std::string cpu_class;
  /// When it was paused; 0 = running. A restarted node adopts it paused.
  int64_t paused_at_ms = 0;
  /// Paused: the running time its TTL had left, ms.
  int64_t ttl_left_ms = 0;
  /// The exec defaults its layers gave (workdir and user; their env went
  /// into the backend's environment at create). Empty fields: none.
  std::string exec_workdir;
  std::string exec_user;
};

/// The record format's version: 2 holds the TTL state (1 kept it in ttl.json).
inline constexpr int record_version = 2;

/// A spec as JSON that parse_spec() reads back to the same spec.
std::string encode(const sandbox_spec& spec);

/// `{"version":2,"id":...,"spec":{...},"created_at_ms":...,"expires_at_ms":...,
/// "digests":[...],"paused_at_ms":...,"ttl_left_ms":...}`, plus "cpu_class"
/// when set.
std::string encode(const sandbox_record& rec);

/// Reads a record written by encode(sandbox_record), of this version or
/// version 1 (no TTL state: running, its expiry as created). Tolerant of
/// unknown fields (in the record and its spec: a newer node may add some); a
/// body that is not a record (no id, no spec, bad types, a spec that no
/// longer validates) is an invalid_argument saying what is wrong.
expected<sandbox_record> decode_record(std::string_view body);

/// Folds a version 1 node's `ttl.json` (ttl::decode) into `rec`: paused (at
/// paused_at_ms, with the time left) or running to the expiry a resume moved.
void merge_ttl_file(sandbox_record& rec, std::string_view ttl_json_body, std::string* why);

} // namespace dsec::json_codec
