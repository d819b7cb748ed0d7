// Strict JSON parsing of specs and exec requests, and encoding of answers.
// Strings that are not valid UTF-8 (command output) are encoded with U+FFFD
// replacements rather than failing.
#include "core/json_codec.hpp"

#include "core/error_kind.hpp"
#include "core/json_codec_ttl.hpp"
#include "core/validate.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace dsec::json_codec {

using nlohmann::json;

namespace {

error bad(const std::string& field, const std::string& what) {
  return invalid_argument(field + ": " + what);
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

expected<json> parse_object(std::string_view body, const char* what) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded())
    return invalid_argument(std::string{what} + ": body is not valid JSON");
  if (!j.is_object())
    return invalid_argument(std::string{what} + ": body must be a JSON object");
  return j;
}

status get_string(const json& j, const char* key, std::string& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_string())
    return bad(key, "must be a string");
  out = it->get<std::string>();
  if (out.size() > spec_limits::max_string)
    return too_large(std::string{key} + ": longer than 4096 bytes");
  return {};
}

/// Reads a number field within [lo, hi]; `whole` also demands an integer.
status get_number(const json& j, const char* key, double& out, double lo, double hi, bool whole) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_number())
    return bad(key, "must be a number");
  double d = it->get<double>();
  if (whole && std::isfinite(d) && d != std::floor(d))
    return bad(key, "must be a whole number");
  if (!std::isfinite(d) || d < lo || d > hi)
    return bad(key, "must be between " + json(whole ? json(static_cast<int64_t>(lo)) : json(lo)).dump()
                      + " and " + (whole ? json(static_cast<int64_t>(hi)) : json(hi)).dump()
                      + ", got " + it->dump());
  out = d;
  return {};
}

status get_int(const json& j, const char* key, int64_t& out, int64_t lo, int64_t hi) {
  double d = static_cast<double>(out);
  auto st = get_number(j, key, d, static_cast<double>(lo), static_cast<double>(hi), true);
  if (st)
    out = static_cast<int64_t>(d);
  return st;
}

status get_double(const json& j, const char* key, double& out, double lo, double hi) {
  return get_number(j, key, out, lo, hi, false);
}

status get_string_list(const json& j, const char* key, std::vector<std::string>& out,
                       size_t max_items) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_array())
    return bad(key, "must be an array of strings");
  if (it->size() > max_items)
    return too_large(std::string{key} + ": more than " + std::to_string(max_items) + " items");
  out.clear();
  for (auto& e : *it) {
    if (!e.is_string())
      return bad(key, "must be an array of strings");
    out.push_back(e.get<std::string>());
    if (out.back().size() > spec_limits::max_string)
      return too_large(std::string{key} + ": an item is longer than 4096 bytes");
  }
  return {};
}

status get_string_map(const json& j, const char* key, std::map<std::string, std::string>& out,
                      size_t max_items) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_object())
    return bad(key, "must be an object of strings");
  if (it->size() > max_items)
    return too_large(std::string{key} + ": more than " + std::to_string(max_items) + " entries");
  out.clear();
  for (auto& [k, v] : it->items()) {
    if (!v.is_string())
      return bad(std::string{key} + "." + k, "must be a string");
    if (k.empty() || k.size() > 256 || v.get<std::string>().size() > spec_limits::max_string)
      return bad(key, "keys must be 1-256 bytes and values at most 4096 bytes");
    out[k] = v.get<std::string>();
  }
  return {};
}

status reject_unknown(const json& j, std::initializer_list<const char*> known, const char* what) {
  for (auto& [k, v] : j.items()) {
    bool ok = false;
    for (auto* name : known)
      ok = ok || k == name;
    if (!ok)
      return invalid_argument(std::string{what} + ": unknown field \"" + k + "\"");
  }
  return {};
}

status parse_network(const json& j, network_policy& out) {
  auto it = j.find("network");
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_object())
    return bad("network", R"(must be {"mode":"none"} or {"allow":[...]})");
  if (auto st = reject_unknown(*it, {"mode", "allow"}, "network"); !st)
    return st;
  std::string mode;
  if (auto st = get_string(*it, "mode", mode); !st)
    return st;
  if (!mode.empty() && mode != "none" && mode != "allow")
    return bad("network.mode", "must be \"none\" or \"allow\", got \"" + mode + "\"");
  return get_string_list(*it, "allow", out.allow, 1024);
}

status parse_protect(const json& j, protect_policy& out) {
  auto it = j.find("protect");
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_object())
    return bad("protect", R"(must be {"readonly":[paths],"hidden":[paths]})");
  if (auto st = reject_unknown(*it, {"readonly", "hidden"}, "protect"); !st)
    return st;
  if (auto st = get_string_list(*it, "readonly", out.readonly, 256); !st)
    return st;
  return get_string_list(*it, "hidden", out.hidden, 256);
}

status spec_from(const json& j, sandbox_spec& s) {
  if (auto st = reject_unknown(j, {"backend", "layers", "cpu", "memory_mb", "disk_mb", "pids",
                                   "ttl_s", "network", "protect", "env", "labels", "cpu_class",
                                   "node", "request_id", "paused_ttl_s"},
                               "spec");
      !st)
    return st;
  status st;
  if ((st = get_string(j, "backend", s.backend)) && (st = get_string_list(j, "layers", s.layers, 4096))
      && (st = get_double(j, "cpu", s.cpu, 0, spec_limits::max_cpu))
      && (st = get_int(j, "memory_mb", s.memory_mb, spec_limits::min_memory_mb,
                       spec_limits::max_memory_mb))
      && (st = get_int(j, "disk_mb", s.disk_mb, 1, spec_limits::max_disk_mb))
      && (st = get_int(j, "pids", s.pids, 8, spec_limits::max_pids))
      && (st = get_int(j, "ttl_s", s.ttl_s, 0, spec_limits::max_ttl_s))
      && (st = get_int(j, "paused_ttl_s", s.paused_ttl_s, 1, spec_limits::max_paused_ttl_s))
      && (st = parse_network(j, s.network)) && (st = parse_protect(j, s.protect))
      && (st = get_string_map(j, "env", s.env, spec_limits::max_env))
      && (st = get_string_map(j, "labels", s.labels, spec_limits::max_labels))
      && (st = get_string(j, "cpu_class", s.cpu_class)) && (st = get_string(j, "node", s.node))
      && (st = get_string(j, "request_id", s.request_id)))
    return validate(s);
  return st;
}

json to_json(const sandbox_info& s) {
  json j = {{"id", s.id},
            {"node", s.node},
            {"state", to_string(s.state)},
            {"backend", s.backend},
            {"layers", s.layers},
            {"labels", s.labels},
            {"created_at", s.created_at_ms / 1000.0},
            {"expires_at", s.expires_at_ms ? json(s.expires_at_ms / 1000.0) : json(nullptr)},
            {"cpu", s.cpu},
            {"memory_mb", s.memory_mb},
            {"disk_mb", s.disk_mb},
            {"cpu_class", s.cpu_class}};
  if (!s.reason.empty())
    j["reason"] = s.reason;
  j["denials"] = {{"network", s.denials.network},
                  {"syscall", s.denials.syscall},
                  {"file", s.denials.file},
                  {"recent", s.denials.recent}};
  // Measured memory (the reclaim actor's last sample).
  j["resident_bytes"] = s.resident_bytes;
  j["swap_bytes"] = s.swap_bytes;
  j["reclaimed_bytes"] = s.reclaimed_bytes;
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
  return {{"ref", l.ref},       {"name", l.name},
          {"version", l.version}, {"kind", l.kind},
          {"digest", l.digest},   {"size_bytes", l.size_bytes},
          {"created_at", l.created_at_ms / 1000.0}};
}

json to_json(const error& e) {
  return {{"error",
           {{"code", to_string(e.code)}, {"message", e.message}, {"infra", is_infra(e)}}}};
}

} // namespace

expected<sandbox_spec> parse_spec(std::string_view body) {
  auto j = parse_object(body, "spec");
  if (!j)
    return j.err();
  sandbox_spec s;
  if (auto st = spec_from(*j, s); !st)
    return st.err();
  return s;
}

expected<std::pair<sandbox_spec, int>> parse_batch(std::string_view body) {
  auto j = parse_object(body, "batch");
  if (!j)
    return j.err();
  if (auto st = reject_unknown(*j, {"spec", "count"}, "batch"); !st)
    return st.err();
  int64_t count = 0;
  if (auto st = get_int(*j, "count", count, 1, 1024); !st)
    return st.err();
  if (count == 0)
    return bad("count", "is required (1-1024)");
  auto it = j->find("spec");
  if (it == j->end() || !it->is_object())
    return bad("spec", "is required and must be an object");
  sandbox_spec s;
  if (auto st = spec_from(*it, s); !st)
    return st.err();
  if (!s.request_id.empty())
    return bad("spec.request_id", "is not allowed in a batch");
  return std::make_pair(std::move(s), static_cast<int>(count));
}

expected<exec_request> parse_exec(std::string_view body) {
  auto j = parse_object(body, "exec");
  if (!j)
    return j.err();
  if (auto st = reject_unknown(*j, {"cmd", "cwd", "env", "stdin", "timeout_s", "step"}, "exec"); !st)
    return st.err();
  exec_request r;
  auto it = j->find("cmd");
  if (it == j->end() || it->is_null())
    return bad("cmd", "is required: a shell command string or an argv array");
  if (it->is_string()) {
    auto cmd = it->get<std::string>();
    if (cmd.empty())
      return bad("cmd", "must not be empty");
    if (cmd.size() > (1u << 20))
      return too_large("cmd: longer than 1 MiB");
    r.argv = {"/bin/sh", "-c", std::move(cmd)};
  } else if (it->is_array()) {
    if (it->empty())
      return bad("cmd", "argv must not be empty");
    size_t total = 0;
    for (auto& a : *it) {
      if (!a.is_string())
        return bad("cmd", "argv items must be strings");
      r.argv.push_back(a.get<std::string>());
      total += r.argv.back().size();
    }
    if (total > (1u << 20) || r.argv.size() > 65536)
      return too_large("cmd: argv larger than 1 MiB");
  } else {
    return bad("cmd", "must be a string or an array of strings");
  }
  for (auto& a : r.argv)
    if (a.find('\0') != std::string::npos)
      return bad("cmd", "must not contain NUL bytes");
  status st;
  if (!(st = get_string(*j, "cwd", r.cwd)) || !(st = get_string_map(*j, "env", r.env, spec_limits::max_env))
      || !(st = get_double(*j, "timeout_s", r.timeout_s, 0, 7 * 24 * 3600.0))
      || !(st = get_string(*j, "step", r.step)))
    return st.err();
  if (auto s = j->find("step"); s != j->end() && !s->is_null() && r.step.empty())
    return bad("step", "must not be empty (leave it out for an exec without one)");
  if (auto in = j->find("stdin"); in != j->end() && !in->is_null()) {
    if (!in->is_string())
      return bad("stdin", "must be a string");
    r.stdin_data = in->get<std::string>();
  }
  if (auto st = validate(r); !st)
    return st.err();
  return r;
}

expected<network_policy> parse_network_policy(std::string_view body) {
  auto j = parse_object(body, "network");
  if (!j)
    return j.err();
  network_policy out;
  if (auto st = parse_network(json{{"network", *j}}, out); !st)
    return st.err();
  if (auto st = validate(out); !st)
    return st.err();
  return out;
}

expected<snapshot_request> parse_snapshot(std::string_view body) {
  snapshot_request out;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return out; // no body: default name and version
  auto j = parse_object(body, "snapshot");
  if (!j)
    return j.err();
  status st;
  if (!(st = reject_unknown(*j, {"name", "version"}, "snapshot"))
      || !(st = get_string(*j, "name", out.name)) || !(st = get_string(*j, "version", out.version)))
    return st.err();
  return out;
}

expected<fncall_request> parse_fncall(std::string_view body) {
  auto j = parse_object(body, "fncall");
  if (!j)
    return j.err();
  fncall_request r;
  status st;
  if (!(st = reject_unknown(*j, {"language", "code", "stdin", "timeout_s", "files"}, "fncall"))
      || !(st = get_string(*j, "language", r.language)) || !(st = get_string(*j, "code", r.code))
      || !(st = get_string(*j, "stdin", r.stdin_data))
      || !(st = get_double(*j, "timeout_s", r.timeout_s, 0.001, 3600))
      || !(st = get_string_map(*j, "files", r.files, 1024)))
    return st.err();
  if (r.language.empty())
    return bad("language", "is required: \"python\" or \"bash\"");
  if (auto st2 = validate(r); !st2)
    return st2.err();
  return r;
}

std::string encode(const snapshot_info& s) {
  return dump({{"ref", s.ref},
               {"digest", s.digest},
               {"layers", s.layers},
               {"size_bytes", s.size_bytes},
               {"duration_ms", s.duration_ms}});
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

// -- decoders -----------------------------------------------------------------

namespace {

template <class T>
T value_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

sandbox_state state_from(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(sandbox_state::lost); ++i)
    if (s == to_string(static_cast<sandbox_state>(i)))
      return static_cast<sandbox_state>(i);
  return sandbox_state::failed;
}

sandbox_info sandbox_from(const json& j) {
  sandbox_info s;
  s.id = value_or<std::string>(j, "id", "");
  s.node = value_or<std::string>(j, "node", "");
  s.state = state_from(value_or<std::string>(j, "state", ""));
  s.backend = value_or<std::string>(j, "backend", "");
  s.layers = value_or<std::vector<std::string>>(j, "layers", {});
  s.labels = value_or<std::map<std::string, std::string>>(j, "labels", {});
  s.created_at_ms = static_cast<int64_t>(value_or<double>(j, "created_at", 0) * 1000);
  s.expires_at_ms = static_cast<int64_t>(value_or<double>(j, "expires_at", 0) * 1000);
  s.reason = value_or<std::string>(j, "reason", "");
  s.cpu = value_or<double>(j, "cpu", 0);
  s.memory_mb = value_or<int64_t>(j, "memory_mb", 0);
  s.disk_mb = value_or<int64_t>(j, "disk_mb", 0);
  s.cpu_class = value_or<std::string>(j, "cpu_class", "latency");
  if (auto d = j.find("denials"); d != j.end() && d->is_object()) {
    s.denials.network = value_or<int64_t>(*d, "network", 0);
    s.denials.syscall = value_or<int64_t>(*d, "syscall", 0);
    s.denials.file = value_or<int64_t>(*d, "file", 0);
    s.denials.recent = value_or<std::vector<std::string>>(*d, "recent", {});
  }
  s.resident_bytes = value_or<int64_t>(j, "resident_bytes", 0);
  s.swap_bytes = value_or<int64_t>(j, "swap_bytes", 0);
  s.reclaimed_bytes = value_or<int64_t>(j, "reclaimed_bytes", 0);
  if (auto i = j.find("idle_since"); i != j.end() && i->is_number())
    s.idle_since_ms = i->get<int64_t>();
  return s;
}

expected<json> parse_any(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return internal_error("answer is not a JSON object: " + std::string{body.substr(0, 200)});
  return j;
}

} // namespace

expected<sandbox_info> decode_sandbox(std::string_view body) {
  auto j = parse_any(body);
  if (!j)
    return j.err();
  return sandbox_from(*j);
}

expected<std::vector<sandbox_info>> decode_sandboxes(std::string_view body) {
  auto j = parse_any(body);
  if (!j)
    return j.err();
  std::vector<sandbox_info> out;
  auto it = j->find("sandboxes");
  if (it != j->end() && it->is_array())
    for (auto& e : *it)
      out.push_back(sandbox_from(e));
  return out;
}

expected<exec_result> decode_exec_result(std::string_view body) {
  auto j = parse_any(body);
  if (!j)
    return j.err();
  exec_result r;
  r.exit_code = value_or<int32_t>(*j, "exit_code", -1);
  r.stdout_data = value_or<std::string>(*j, "stdout", "");
  r.stderr_data = value_or<std::string>(*j, "stderr", "");
  r.timed_out = value_or<bool>(*j, "timed_out", false);
  r.duration_ms = value_or<double>(*j, "duration_ms", 0);
  r.truncated = value_or<bool>(*j, "truncated", false);
  r.node_ms = value_or<double>(*j, "node_ms", 0);
  r.replayed = value_or<bool>(*j, "replayed", false);
  return r;
}

expected<std::vector<layer_info>> decode_layers(std::string_view body) {
  auto j = parse_any(body);
  if (!j)
    return j.err();
  std::vector<layer_info> out;
  auto it = j->find("layers");
  if (it != j->end() && it->is_array())
    for (auto& e : *it) {
      layer_info l;
      l.ref = value_or<std::string>(e, "ref", "");
      l.name = value_or<std::string>(e, "name", "");
      l.version = value_or<std::string>(e, "version", "");
      l.kind = value_or<std::string>(e, "kind", "");
      l.digest = value_or<std::string>(e, "digest", "");
      l.size_bytes = value_or<int64_t>(e, "size_bytes", 0);
      l.created_at_ms = static_cast<int64_t>(value_or<double>(e, "created_at", 0) * 1000);
      out.push_back(std::move(l));
    }
  return out;
}

error decode_error(std::string_view body, int http_status) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    auto it = j.find("error");
    if (it != j.end() && it->is_object())
      return {errc_from_string(value_or<std::string>(*it, "code", "internal")),
              value_or<std::string>(*it, "message", "")};
  }
  return internal_error("HTTP " + std::to_string(http_status) + ": "
                        + std::string{body.substr(0, 200)});
}

// -- the sandbox record ---------------------------------------------------------

namespace {

json spec_to_json(const sandbox_spec& s) {
  json network = s.network.allow.empty() ? json{{"mode", "none"}}
                                         : json{{"allow", s.network.allow}};
  return {{"backend", s.backend},
          {"layers", s.layers},
          {"cpu", s.cpu},
          {"memory_mb", s.memory_mb},
          {"disk_mb", s.disk_mb},
          {"pids", s.pids},
          {"ttl_s", s.ttl_s},
          {"network", std::move(network)},
          {"protect", {{"readonly", s.protect.readonly}, {"hidden", s.protect.hidden}}},
          {"env", s.env},
          {"labels", s.labels},
          {"cpu_class", s.cpu_class},
          {"node", s.node},
          {"request_id", s.request_id},
          {"paused_ttl_s", s.paused_ttl_s}};
}

// The spec fields this version knows; a record's spec may carry more.
constexpr const char* known_spec_fields[] = {
  "backend", "layers", "network", "protect", "env", "labels", "cpu", "memory_mb", "disk_mb",
  "pids", "ttl_s", "cpu_class", "node", "request_id", "paused_ttl_s"};

// Records hold epoch milliseconds: whole numbers well inside a double's 2^53.
constexpr int64_t max_record_ms = int64_t{1} << 52;

} // namespace

std::string encode(const sandbox_spec& spec) { return dump(spec_to_json(spec)); }

std::string encode(const sandbox_record& rec) {
  json j{{"version", 1},
         {"id", rec.id},
         {"spec", spec_to_json(rec.spec)},
         {"created_at_ms", rec.created_at_ms},
         {"expires_at_ms", rec.expires_at_ms},
         {"digests", rec.digests}};
  if (!rec.cpu_class.empty())
    j["cpu_class"] = rec.cpu_class;
  return dump(j);
}

expected<sandbox_record> decode_record(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("record: not a JSON object");
  sandbox_record r;
  if (auto st = get_string(j, "id", r.id); !st)
    return invalid_argument("record: " + st.err().message);
  if (r.id.empty())
    return invalid_argument("record: id is missing");
  auto it = j.find("spec");
  if (it == j.end() || !it->is_object())
    return invalid_argument("record " + r.id + ": spec is missing or not an object");
  json known = json::object();
  for (auto* key : known_spec_fields)
    if (auto f = it->find(key); f != it->end())
      known[key] = *f;
  if (auto st = spec_from(known, r.spec); !st)
    return invalid_argument("record " + r.id + ": spec: " + st.err().message);
  status st;
  if (!(st = get_int(j, "created_at_ms", r.created_at_ms, 0, max_record_ms))
      || !(st = get_int(j, "expires_at_ms", r.expires_at_ms, 0, max_record_ms))
      || !(st = get_string_list(j, "digests", r.digests, spec_limits::max_layers))
      || !(st = get_string(j, "cpu_class", r.cpu_class))
      || (!r.cpu_class.empty() && !(st = validate_cpu_class(r.cpu_class))))
    return invalid_argument("record " + r.id + ": " + st.err().message);
  if (r.created_at_ms == 0)
    return invalid_argument("record " + r.id + ": created_at_ms is missing");
  if (r.digests.size() != r.spec.layers.size())
    return invalid_argument("record " + r.id + ": " + std::to_string(r.digests.size())
                            + " digests for " + std::to_string(r.spec.layers.size()) + " layers");
  return r;
}

} // namespace dsec::json_codec
