// Decoders for clients (the CLI, benches): read the node's answers back,
// tolerant of unknown fields and of fields of the wrong type (they keep their
// defaults), so an older client still reads a newer node.
#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"
#include "core/spec_fields.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

sandbox_state state_from(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(sandbox_state::lost); ++i)
    if (s == to_string(static_cast<sandbox_state>(i)))
      return static_cast<sandbox_state>(i);
  return sandbox_state::failed;
}

/// The fields of T's list that answers show, read leniently: a missing or
/// mistyped field keeps its default.
template <class T>
void read_shown(const json& j, T& x) {
  for_each_field<T>([&](const auto& fd) {
    using F = std::decay_t<decltype(fd)>;
    auto& v = x.*(fd.member);
    if constexpr (F::form == shown::plain || F::form == shown::json_only) {
      if constexpr (has_field_list_v<typename F::type>) {
        if (auto it = j.find(fd.name); it != j.end() && it->is_object())
          read_shown(*it, v);
      } else {
        v = value_or(j, fd.name, v);
      }
    } else if constexpr (F::form == shown::unix_s || F::form == shown::unix_s_or_null) {
      v = static_cast<int64_t>(value_or<double>(j, fd.name, 0) * 1000);
    }
  });
}

sandbox_info sandbox_from(const json& j) {
  sandbox_info s;
  read_shown(j, s);
  // The special fields (core/spec_fields.hpp says why).
  s.state = state_from(value_or<std::string>(j, "state", ""));
  s.reason = value_or<std::string>(j, "reason", "");
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
      if (auto c = e.find("config"); c != e.end() && c->is_object()) {
        if (auto env = c->find("env"); env != c->end() && env->is_object())
          for (auto kv = env->begin(); kv != env->end(); ++kv)
            if (kv.value().is_string())
              l.config.env[kv.key()] = kv.value().get<std::string>();
        l.config.workdir = value_or<std::string>(*c, "workdir", "");
        l.config.user = value_or<std::string>(*c, "user", "");
        if (auto s = c->find("start"); s != c->end() && s->is_array())
          for (auto& a : *s)
            if (a.is_string())
              l.config.start.push_back(a.get<std::string>());
      }
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
