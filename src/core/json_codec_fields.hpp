// Internal to the JSON codec: the strict field readers that the request
// parsers and the record decoder share (json_codec_fields.cpp). Each reads one
// optional field of a JSON object into `out` and answers an invalid_argument
// (or too_large) naming the field when its type or value is wrong; a missing
// or null field leaves `out` as it was.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::json_codec {

/// The lenient reader of answers and records: field `key` of `j` as a T, or
/// `fallback` when it is missing, null or of another type (a newer peer's or
/// an older file's shape never fails the whole decode).
template <class T>
T value_or(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null())
    return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

/// `field: what` as an invalid_argument.
error bad(const std::string& field, const std::string& what);

/// Compact JSON; strings that are not valid UTF-8 get U+FFFD replacements.
std::string dump(const nlohmann::json& j);

/// `body` as a JSON object; `what` names the body in the error.
expected<nlohmann::json> parse_object(std::string_view body, const char* what);

/// A string field, at most spec_limits::max_string bytes.
status get_string(const nlohmann::json& j, const char* key, std::string& out);

/// A number field within [lo, hi]; `whole` also demands an integer.
status get_number(const nlohmann::json& j, const char* key, double& out, double lo, double hi,
                  bool whole);

/// A whole number field within [lo, hi].
status get_int(const nlohmann::json& j, const char* key, int64_t& out, int64_t lo, int64_t hi);

/// A number field within [lo, hi].
status get_double(const nlohmann::json& j, const char* key, double& out, double lo, double hi);

/// An array of strings, at most `max_items` of them, each at most max_string bytes.
status get_string_list(const nlohmann::json& j, const char* key, std::vector<std::string>& out,
                       size_t max_items);

/// An object of strings, at most `max_items` entries, keys 1-256 bytes.
status get_string_map(const nlohmann::json& j, const char* key,
                      std::map<std::string, std::string>& out, size_t max_items);

/// Refuses any key of `j` not among the `n` names at `known`; `what` names
/// the object.
status reject_unknown(const nlohmann::json& j, const char* const* known, size_t n,
                      const char* what);

inline status reject_unknown(const nlohmann::json& j, std::initializer_list<const char*> known,
                             const char* what) {
  return reject_unknown(j, known.begin(), known.size(), what);
}

/// Reads a spec object strictly (unknown fields refused) and validates it
/// (json_codec.cpp; the record decoder reads the spec inside a record with it).
status spec_from(const nlohmann::json& j, sandbox_spec& s);

} // namespace dsec::json_codec
