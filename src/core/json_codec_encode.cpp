// Encoding of the node's answers: sandbox infos and lists, exec results and
// streamed exec events, layers, node status, the cluster view, errors and
// batch results. Strings that are not valid UTF-8 (command output) are
// encoded with U+FFFD replacements rather than failing.
#include <nlohmann/json.hpp>

#include "core/error_kind.hpp"
#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"
#include "core/json_codec_ttl.hpp"
#include "core/spec_fields.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

json to_json(const sandbox_info& s) {
  json j = json::object();
  write_shown(j, s, audience::json, json(nullptr));
  // The special fields (core/spec_fields.hpp says why).
  j["state"] = to_string(s.state);
  if (!s.reason.empty())
    j["reason"] = s.reason;
  j["idle_since"] = s.idle_since_ms ? json(s.idle_since_ms) : json(nullptr);
  add_ttl_fields(j, s); // core/ttl.hpp
  return j;
}

json to_json(const exec_result& r) {
  return {{"exit_code", r.exit_code}, {"stdout", r.stdout_data},  {"stderr", r.stderr_data},
          {"timed_out", r.timed_out}, {"duration_ms", r.duration_ms}, {"truncated", r.truncated},
          {"node_ms", r.node_ms}, {"replayed", r.replayed}};
}

json to_json(const layer_info& l) {
  // "config": the exec defaults (env, workdir, user), each null/empty when unset.
  json config = {{"env", l.config.env},
                 {"workdir", l.config.workdir.empty() ? json(nullptr) : json(l.config.workdir)},
                 {"user", l.config.user.empty() ? json(nullptr) : json(l.config.user)}};
  if (!l.config.start.empty()) // a layer's background server (layer_config::start)
    config["start"] = l.config.start;
  return {{"ref", l.ref},       {"name", l.name},
          {"version", l.version}, {"kind", l.kind},
          {"digest", l.digest},   {"size_bytes", l.size_bytes},
          {"created_at", l.created_at_ms / 1000.0}, {"config", std::move(config)}};
}

json to_json(const error& e) {
  return {{"error",
           {{"code", to_string(e.code)}, {"message", e.message}, {"infra", is_infra(e)}}}};
}

} // namespace

std::string encode(const snapshot_info& s) {
  return dump({{"ref", s.ref},
               {"digest", s.digest},
               {"layers", s.layers},
               {"size_bytes", s.size_bytes},
               {"duration_ms", s.duration_ms}});
}

std::string encode(const sandbox_metric& m) {
  return dump({{"timestamp_ms", m.timestamp_ms},
               {"cpu_count", m.cpu_count},
               {"cpu_used_pct", m.cpu_used_pct},
               {"mem_used_bytes", m.mem_used},
               {"mem_total_bytes", m.mem_total}});
}

std::string encode(const sandbox_info& info) { return dump(to_json(info)); }

std::string encode(const std::vector<sandbox_info>& list) {
  json arr = json::array();
  for (auto& s : list)
    arr.push_back(to_json(s));
  return dump(json{{"sandboxes", std::move(arr)}});
}

std::string encode(const exec_result& res) { return dump(to_json(res)); }

std::string encode_event(const exec_chunk& chunk) {
  return dump(json{{"type", chunk.stream == 2 ? "stderr" : "stdout"}, {"data", chunk.data}}) + "\n";
}

std::string encode_exit_event(const exec_result& res) {
  auto j = to_json(res);
  j["type"] = "exit";
  return dump(j) + "\n";
}

std::string encode(const std::vector<layer_info>& list) {
  json arr = json::array();
  for (auto& l : list)
    arr.push_back(to_json(l));
  return dump(json{{"layers", std::move(arr)}});
}

std::string encode(const node_status& st) {
  // "backends": {"microvm": {"available": true, "accel": "tcg", "accel_reason": "..."}, ...};
  // "reason" only when unavailable, the accel keys only for VM backends.
  json backends = json::object();
  for (auto& b : st.backends) {
    json j{{"available", b.available}};
    if (!b.reason.empty())
      j["reason"] = b.reason;
    if (!b.accel.empty()) {
      j["accel"] = b.accel;
      j["accel_reason"] = b.accel_reason;
    }
    backends[b.name] = std::move(j);
  }
  return dump(json{{"status", "ok"},
                   {"node", st.node_id},
                   {"version", st.version},
                   {"sandboxes", st.sandboxes},
                   {"creating", st.creating},
                   {"uptime_s", st.uptime_ms / 1000.0},
                   {"pid", st.pid},
                   {"backends", std::move(backends)},
                   {"memory",
                    {{"resident_bytes", st.resident_bytes},
                     {"swap_bytes", st.swap_bytes},
                     {"reclaimed_bytes_total", st.reclaimed_bytes_total},
                     {"idle_sandboxes", st.idle_sandboxes},
                     {"available_mb", st.memory_available_mb},
                     {"free_mb", st.memory_free_mb}}}});
}

std::string encode(const error& err) { return dump(to_json(err)); }

std::string encode_nodes(const std::vector<member_info>& members) {
  json arr = json::array();
  for (auto& m : members)
    arr.push_back({{"id", m.id},
                   {"address", m.address},
                   {"state", m.state},
                   {"incarnation", m.incarnation},
                   {"load",
                    {{"free_memory_mb", m.free_memory_mb},
                     {"cpu_load", m.cpu_load},
                     {"sandboxes", m.sandboxes},
                     {"creating", m.creating},
                     {"accepting", m.accepting},
                     {"layers", m.layers}}}});
  return dump(json{{"nodes", std::move(arr)}});
}

std::string encode_deleted(const std::string& id, bool existed) {
  return dump(json{{"id", id}, {"deleted", existed}});
}

std::string encode_file_written(const std::string& path, size_t size) {
  return dump(json{{"path", path}, {"size", size}});
}

std::string encode_batch(const std::vector<sandbox_info>& created,
                         const std::vector<error>& errors) {
  json ok = json::array(), bad_items = json::array();
  for (auto& s : created)
    ok.push_back(to_json(s));
  for (auto& e : errors)
    bad_items.push_back(to_json(e)["error"]);
  return dump(json{{"sandboxes", std::move(ok)}, {"errors", std::move(bad_items)}});
}

} // namespace dsec::json_codec
