// The strict field readers of the JSON codec (see json_codec_fields.hpp):
// one function per JSON type, each naming the field it refuses.
#include "core/json_codec_fields.hpp"

#include <cmath>

namespace dsec::json_codec {

using nlohmann::json;

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

status reject_unknown(const json& j, const char* const* known, size_t n, const char* what) {
  for (auto& [k, v] : j.items()) {
    bool ok = false;
    for (size_t i = 0; i < n; ++i)
      ok = ok || k == known[i];
    if (!ok)
      return invalid_argument(std::string{what} + ": unknown field \"" + k + "\"");
  }
  return {};
}

} // namespace dsec::json_codec
