// The one list of the fields of a sandbox spec (with its network and protect
// policies) and of a sandbox info (with its denial counts): for each field,
// in wire order, the name callers see and the member. What walks these
// structs field by field derives from here:
//   - inspect() (core/inspect.hpp): the tuple order IS the wire order between
//     processes, so fields are append only, as in core/types.hpp;
//   - the JSON codec: requests (json_codec.cpp), answers (_encode), client
//     decoding (_decode) and the sandbox record (_record);
//   - the Python binding's dict conversions (bindings/python/convert.cpp);
//     dsec/types.py, dsec/_spec.py and dsec/__init__.pyi cannot include C++,
//     so test/e2e/test_spec_fields.py checks them against the names the
//     native module derives from these lists;
//   - same_request() below.
// A field a codec does not show as "its name, its value" carries a form
// (`shown`) other than plain, and the comment at it says why.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "core/types.hpp"

namespace dsec {

/// How a field appears in answers (JSON, the Python dict) and requests.
enum class shown : uint8_t {
  /// Under its name with its value; a struct with a field list nests as an
  /// object (JSON) and flattens to `<name>_<field>` keywords (Python spec).
  plain,
  /// As plain in JSON; not part of Python's SandboxInfo.
  json_only,
  /// Unix ms as Unix seconds (a double) under its name (which drops "_ms").
  unix_s,
  /// As unix_s, but 0 ("never", "not now") is null / None.
  unix_s_or_null,
  /// Each codec writes and reads it by hand; the comment at it says how.
  special,
  /// Not shown: it feeds a derived field.
  internal,
};

/// What a request may ask of a spec field, and the refusal when it asks more:
/// a number outside [lo, hi] is invalid_argument "<field>: <message>", a list
/// or map of more than hi items too_large "<field>: <message>" (strings:
/// spec_limits::max_string). The bound and its message are one declaration,
/// as in Firecracker's machine config: the message names the numbers it
/// enforces (checked at compile time below, and a table test in
/// test/unit/spec_fields_test.cpp feeds each field one past its bound).
/// validate() and the JSON parser both read them from here. Unused in answers;
/// no message = no bound.
struct range {
  double lo = 0;
  double hi = 0;
  const char* message = nullptr;
};

/// True if `v` (a number, or the size of a list or map) lies within `r`;
/// false for NaN.
constexpr bool within(const range& r, double v) { return v >= r.lo && v <= r.hi; }

/// True if `text` holds the decimal `n` as a whole number (no digit beside it).
constexpr bool names_number(const char* text, long long n) {
  char digits[24] = {};
  int len = 0;
  bool neg = n < 0;
  unsigned long long u = neg ? 0ull - static_cast<unsigned long long>(n)
                             : static_cast<unsigned long long>(n);
  do {
    digits[len++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg)
    digits[len++] = '-';
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  for (int i = 0; text[i] != 0; ++i) {
    int k = 0;
    while (k < len && text[i + k] == digits[len - 1 - k])
      ++k;
    if (k == len && (i == 0 || !is_digit(text[i - 1])) && !is_digit(text[i + len]))
      return true;
  }
  return false;
}

/// One field of T: its public name, its member and how it is shown.
template <class T, class M, shown Form>
struct field {
  static constexpr shown form = Form;
  using type = M;
  const char* name;
  M T::*member;
  range limits;
};

/// `field` with its types deduced:
/// fld("cpu", &sandbox_spec::cpu, {0, 256, "must be between 0 and 256"}).
template <shown Form = shown::plain, class T, class M>
constexpr field<T, M, Form> fld(const char* name, M T::*member, range limits = {}) {
  return {name, member, limits};
}

/// The fields of T, in wire order (specialized below for the types that have a list).
template <class T>
struct field_list;

template <class T, class = void>
struct has_field_list : std::false_type {};
template <class T>
struct has_field_list<T, std::void_t<decltype(field_list<T>::fields)>> : std::true_type {};
template <class T>
inline constexpr bool has_field_list_v = has_field_list<T>::value;

/// Calls `f(field)` for each field of T, in wire order.
template <class T, class F>
constexpr void for_each_field(F&& f) {
  std::apply([&](const auto&... fd) { (f(fd), ...); }, field_list<T>::fields);
}

/// The public names of T's fields, in wire order.
template <class T>
constexpr auto field_names() {
  return std::apply(
    [](const auto&... fd) { return std::array<const char*, sizeof...(fd)>{fd.name...}; },
    field_list<T>::fields);
}

/// The bound of T's field `name`; no bound (no message) if T has none by
/// that name.
template <class T>
constexpr range bound_of(std::string_view name) {
  range r;
  for_each_field<T>([&](const auto& fd) {
    if (std::string_view{fd.name} == name)
      r = fd.limits;
  });
  return r;
}

/// Calls `f(x.member...)`: what inspect() hands to a CAF inspector.
template <class T, class F>
decltype(auto) apply_members(T& x, F&& f) {
  return std::apply([&](const auto&... fd) -> decltype(auto) { return f(x.*(fd.member)...); },
                    field_list<std::remove_const_t<T>>::fields);
}

/// Every field of T's list equal in `a` and `b`; fields that have a list of
/// their own compared field by field in turn.
template <class T>
bool equal_fields(const T& a, const T& b) {
  bool same = true;
  for_each_field<T>([&](const auto& fd) {
    if constexpr (has_field_list_v<typename std::decay_t<decltype(fd)>::type>)
      same = same && equal_fields(a.*(fd.member), b.*(fd.member));
    else
      same = same && a.*(fd.member) == b.*(fd.member);
  });
  return same;
}

// -- sandbox_spec -----------------------------------------------------------------

template <>
struct field_list<network_policy> {
  // 256 is what requests have always met (validate() refused more; the 1024
  // once written here was never reachable). The kernel's map holds 128 per
  // sandbox: the allow-list grammar (core/allow_list.hpp, max_allow_entries)
  // refuses 129-256 as invalid_argument with that reason; this bound keeps
  // a huge list from being parsed entry by entry at all.
  static constexpr auto fields =
    std::make_tuple(fld("allow", &network_policy::allow, {0, 256, "more than 256 entries"}),
                    fld("deny", &network_policy::deny, {0, 256, "more than 256 entries"}));
};

template <>
struct field_list<protect_policy> {
  static constexpr auto fields =
    std::make_tuple(fld("readonly", &protect_policy::readonly, {0, 256, "more than 256 entries"}),
                    fld("hidden", &protect_policy::hidden, {0, 256, "more than 256 entries"}));
};

template <>
struct field_list<sandbox_spec> {
  static constexpr auto fields = std::make_tuple(
    fld("backend", &sandbox_spec::backend),
    // At least one layer (or an image) is a rule of its own (validate()).
    fld("layers", &sandbox_spec::layers, {0, spec_limits::max_layers, "more than 128 layers"}),
    fld("cpu", &sandbox_spec::cpu, {0, spec_limits::max_cpu, "must be between 0 and 256"}),
    fld("memory_mb", &sandbox_spec::memory_mb,
        {spec_limits::min_memory_mb, spec_limits::max_memory_mb,
         "must be between 8 and 1048576"}),
    fld("disk_mb", &sandbox_spec::disk_mb,
        {1, spec_limits::max_disk_mb, "must be between 1 and 4194304"}),
    fld("pids", &sandbox_spec::pids, {8, spec_limits::max_pids, "must be between 8 and 1048576"}),
    fld("ttl_s", &sandbox_spec::ttl_s,
        {0, spec_limits::max_ttl_s, "must be between 0 and 2592000"}),
    // Special in JSON only: an empty allow-list is written {"mode":"none"}
    // and read from "mode" or "allow" (json_codec.cpp parse_network), the
    // shape PUT .../network takes too. Python flattens it as any policy.
    fld<shown::special>("network", &sandbox_spec::network),
    fld("protect", &sandbox_spec::protect),
    fld("env", &sandbox_spec::env, {0, spec_limits::max_env, "more than 1024 entries"}),
    fld("labels", &sandbox_spec::labels, {0, spec_limits::max_labels, "more than 64 entries"}),
    fld("cpu_class", &sandbox_spec::cpu_class),
    fld("node", &sandbox_spec::node),
    fld("request_id", &sandbox_spec::request_id),
    fld("paused_ttl_s", &sandbox_spec::paused_ttl_s,
        {1, spec_limits::max_paused_ttl_s, "must be between 1 and 2592000"}),
    // A reference validate() parses (core/image_reference.hpp).
    fld("image", &sandbox_spec::image),
    // "destroy" | "pause" (validate()).
    fld("on_timeout", &sandbox_spec::on_timeout),
    fld("idle_timeout_s", &sandbox_spec::idle_timeout_s,
        {0, spec_limits::max_ttl_s, "must be between 0 and 2592000"}),
    // "pause" | "destroy" (validate()).
    fld("on_idle", &sandbox_spec::on_idle),
    fld("auto_resume", &sandbox_spec::auto_resume));
};

/// True if every bounded field of T (nested lists too) has a message that
/// names its upper bound, and for numbers its lower bound as well.
template <class T>
constexpr bool bounds_named() {
  bool ok = true;
  for_each_field<T>([&](const auto& fd) {
    using M = typename std::decay_t<decltype(fd)>::type;
    if constexpr (has_field_list_v<M>) {
      ok = ok && bounds_named<M>();
    } else if (fd.limits.message != nullptr) {
      ok = ok && names_number(fd.limits.message, static_cast<long long>(fd.limits.hi));
      if constexpr (std::is_arithmetic_v<M>)
        ok = ok && names_number(fd.limits.message, static_cast<long long>(fd.limits.lo));
    }
  });
  return ok;
}
static_assert(bounds_named<sandbox_spec>(), "a spec bound's message must name its numbers");

/// True if two specs ask for the same sandbox (request_id idempotency):
/// every field of the list is equal, so a new field counts without an edit.
bool same_request(const sandbox_spec& a, const sandbox_spec& b);

// -- sandbox_info -----------------------------------------------------------------

template <>
struct field_list<denial_counts> {
  static constexpr auto fields = std::make_tuple(
    fld("network", &denial_counts::network), fld("syscall", &denial_counts::syscall),
    fld("file", &denial_counts::file), fld("recent", &denial_counts::recent));
};

template <>
struct field_list<sandbox_info> {
  static constexpr auto fields = std::make_tuple(
    fld("id", &sandbox_info::id),
    fld("node", &sandbox_info::node),
    // An enum: shown as its name (to_string), read back by name.
    fld<shown::special>("state", &sandbox_info::state),
    fld("backend", &sandbox_info::backend),
    fld("layers", &sandbox_info::layers),
    fld("labels", &sandbox_info::labels),
    fld<shown::unix_s>("created_at", &sandbox_info::created_at_ms),
    fld<shown::unix_s_or_null>("expires_at", &sandbox_info::expires_at_ms),
    // JSON leaves it out when empty (most sandboxes have none); Python's
    // SandboxInfo always has it ("" by default).
    fld<shown::special>("reason", &sandbox_info::reason),
    fld("cpu", &sandbox_info::cpu),
    fld("memory_mb", &sandbox_info::memory_mb),
    fld("disk_mb", &sandbox_info::disk_mb),
    fld("denials", &sandbox_info::denials),
    // The measured memory is for operators (REST, /metrics); the Python
    // SandboxInfo has never carried it.
    fld<shown::json_only>("resident_bytes", &sandbox_info::resident_bytes),
    fld<shown::json_only>("swap_bytes", &sandbox_info::swap_bytes),
    fld<shown::json_only>("reclaimed_bytes", &sandbox_info::reclaimed_bytes),
    // JSON only, and in Unix ms (not seconds) or null when busy, as it
    // always was; not in Python's SandboxInfo.
    fld<shown::special>("idle_since", &sandbox_info::idle_since_ms),
    fld("cpu_class", &sandbox_info::cpu_class),
    // ttl_s and ttl_left_ms are shown as the derived "ttl_remaining_s"
    // (core/ttl.hpp remaining_ms), which counts running time only.
    fld<shown::internal>("ttl_s", &sandbox_info::ttl_s),
    fld("paused_ttl_s", &sandbox_info::paused_ttl_s),
    fld<shown::internal>("ttl_left_ms", &sandbox_info::ttl_left_ms),
    fld<shown::unix_s_or_null>("paused_expires_at", &sandbox_info::paused_expires_at_ms),
    fld("image", &sandbox_info::image),
    fld("on_timeout", &sandbox_info::on_timeout),
    fld("idle_timeout_s", &sandbox_info::idle_timeout_s),
    fld("on_idle", &sandbox_info::on_idle),
    fld("auto_resume", &sandbox_info::auto_resume));
};

// -- answers ------------------------------------------------------------------------

/// Who reads an answer: the JSON API or the Python SDK.
enum class audience : uint8_t { json, python };

/// Writes the fields of `x` that `who` is shown, by their form, into `out`
/// (a JSON object or a Python dict: anything taking `out[name] = value`);
/// `null` is that world's null. Special fields are the caller's to write.
template <class Obj, class T, class Null>
void write_shown(Obj& out, const T& x, audience who, const Null& null) {
  for_each_field<T>([&](const auto& fd) {
    using F = std::decay_t<decltype(fd)>;
    const auto& v = x.*(fd.member);
    if constexpr (F::form == shown::plain || F::form == shown::json_only) {
      if (F::form == shown::json_only && who != audience::json)
        return;
      if constexpr (has_field_list_v<typename F::type>) {
        Obj sub;
        write_shown(sub, v, who, null);
        out[fd.name] = std::move(sub);
      } else {
        out[fd.name] = v;
      }
    } else if constexpr (F::form == shown::unix_s) {
      out[fd.name] = v / 1000.0;
    } else if constexpr (F::form == shown::unix_s_or_null) {
      if (v != 0)
        out[fd.name] = v / 1000.0;
      else
        out[fd.name] = null;
    }
  });
}

} // namespace dsec
