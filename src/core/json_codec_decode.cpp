// Decoders for clients (the CLI, benches): read the node's answers back,
// tolerant of unknown fields and of fields of the wrong type (they keep their
// defaults), so an older client still reads a newer node.
#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

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

} // namespace dsec::json_codec
