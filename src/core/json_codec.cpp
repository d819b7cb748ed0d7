// Strict parsing of what callers send: sandbox specs (alone and in a batch),
// exec requests, network policies, snapshot and fncall bodies. Every wrong
// type, unknown field or absurd value is an invalid_argument naming the
// field. Answers are encoded in json_codec_encode.cpp, client-side decoding
// is in json_codec_decode.cpp, the on-disk record in json_codec_record.cpp.
#include "core/json_codec.hpp"

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/json_codec_fields.hpp"
#include "core/spec_fields.hpp"
#include "core/validate.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

// -- one field of a spec, by its type (the list is core/spec_fields.hpp) -----------
// `path` names the field in refusals ("network.allow"); the bound and its
// message are the field list's, the same validate() enforces.

status read_value(const json& j, const char* key, std::string& out, const range&,
                  const std::string&) {
  return get_string(j, key, out);
}

/// A number of any size, then the field's bound with its message.
status read_number(const json& j, const char* key, double& out, bool whole, const range& r,
                   const std::string& path) {
  double d = out;
  if (auto st = get_number(j, key, d, std::numeric_limits<double>::lowest(),
                           std::numeric_limits<double>::max(), whole);
      !st)
    return st;
  if (r.message != nullptr && j.contains(key) && !within(r, d))
    return bound_error(path, r, false, j.at(key).dump());
  out = d;
  return {};
}

status read_value(const json& j, const char* key, int64_t& out, const range& r,
                  const std::string& path) {
  double d = static_cast<double>(out);
  auto st = read_number(j, key, d, true, r, path);
  if (st && r.message == nullptr && !within({double(INT64_MIN), double(INT64_MAX)}, d))
    return bad(path, "out of range");
  if (st)
    out = static_cast<int64_t>(d);
  return st;
}

status read_value(const json& j, const char* key, double& out, const range& r,
                  const std::string& path) {
  return read_number(j, key, out, false, r, path);
}

status read_value(const json& j, const char* key, bool& out, const range&,
                  const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_boolean())
    return bad(path, "must be true or false");
  out = it->get<bool>();
  return {};
}

/// The count bound first, so a huge list is refused before it is read.
bool over_count(const json& j, const char* key, const range& r) {
  auto it = j.find(key);
  return r.message != nullptr && it != j.end() && (it->is_array() || it->is_object())
         && !within(r, static_cast<double>(it->size()));
}

status read_value(const json& j, const char* key, std::vector<std::string>& out, const range& r,
                  const std::string& path) {
  if (over_count(j, key, r))
    return bound_error(path, r, true);
  return get_string_list(j, key, out, std::numeric_limits<size_t>::max());
}

status read_value(const json& j, const char* key, std::map<std::string, std::string>& out,
                  const range& r, const std::string& path) {
  if (over_count(j, key, r))
    return bound_error(path, r, true);
  return get_string_map(j, key, out, std::numeric_limits<size_t>::max());
}

status read_value(const json& j, const char* key, network_policy& out, const range&,
                  const std::string& path);
status read_value(const json& j, const char* key, protect_policy& out, const range&,
                  const std::string& path);

/// Every field of T's list from `j`, in list order, stopping at the first
/// error; `prefix` names the enclosing object in refusals ("network.").
template <class T>
status read_each(const json& j, T& x, const std::string& prefix = {}) {
  status st;
  for_each_field<T>([&](const auto& fd) {
    if (st)
      st = read_value(j, fd.name, x.*(fd.member), fd.limits, prefix + fd.name);
  });
  return st;
}

/// read_each, and any key not in T's list is refused (`what` names the object).
template <class T>
status read_fields(const json& j, T& x, const char* what, const std::string& prefix = {}) {
  auto names = field_names<T>();
  if (auto st = reject_unknown(j, names.data(), names.size(), what); !st)
    return st;
  return read_each(j, x, prefix);
}

// Special (core/spec_fields.hpp): "mode" is no field, an empty allow-list is
// mode "none".
status read_value(const json& j, const char* key, network_policy& out, const range&,
                  const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_object())
    return bad(key, R"(must be {"mode":"none"} or {"allow":[...]})");
  if (auto st = reject_unknown(*it, {"mode", "allow", "deny"}, key); !st)
    return st;
  std::string mode;
  if (auto st = get_string(*it, "mode", mode); !st)
    return st;
  if (!mode.empty() && mode != "none" && mode != "allow")
    return bad("network.mode", "must be \"none\" or \"allow\", got \"" + mode + "\"");
  return read_each(*it, out, path + ".");
}

status read_value(const json& j, const char* key, protect_policy& out, const range&,
                  const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return {};
  if (!it->is_object())
    return bad(key, R"(must be {"readonly":[paths],"hidden":[paths]})");
  return read_fields(*it, out, key, path + ".");
}

} // namespace

status spec_from(const json& j, sandbox_spec& s) {
  if (auto st = read_fields(j, s, "spec"); !st)
    return st;
  return validate(s);
}

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
  if (auto st = reject_unknown(*j, {"cmd", "cwd", "env", "stdin", "timeout_s", "step", "user"}, "exec"); !st)
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
      || !(st = get_string(*j, "step", r.step)) || !(st = get_string(*j, "user", r.user)))
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
  if (auto st = read_value(json{{"network", *j}}, "network", out, {}, "network"); !st)
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

expected<bool> parse_pause(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return true;
  auto j = parse_object(body, "pause");
  if (!j)
    return j.err();
  if (auto st = reject_unknown(*j, {"keep_memory"}, "pause"); !st)
    return st.err();
  auto it = j->find("keep_memory");
  if (it == j->end() || it->is_null())
    return true;
  if (!it->is_boolean())
    return invalid_argument("pause: keep_memory must be a boolean");
  return it->get<bool>();
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

} // namespace dsec::json_codec
