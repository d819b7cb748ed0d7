// What a well-formed sandbox spec and exec request are, whoever built them:
// the JSON parsers call these after decoding, and the lifecycle actor calls
// them again for requests that arrive over the native protocol (the Python
// SDK), which never pass through JSON. Every failure is an invalid_argument
// (or too_large) naming the field.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/spec_fields.hpp"
#include "core/types.hpp"

namespace dsec {

/// True if `ref` is a `name@version` the layer store accepts
/// (layers::parse_ref in core/layer_ref.hpp).
bool valid_layer_ref(std::string_view ref);

/// Checks a CPU class name: "latency" or "batch" (invalid_argument naming
/// the field otherwise).
status validate_cpu_class(const std::string& cls);

/// The refusal of a value outside a field's bound (core/spec_fields.hpp),
/// "<field>: <message>": invalid_argument for a number, too_large for the
/// count of a list or map; a non-empty `got` is added as ", got <got>".
error bound_error(const std::string& field, const range& r, bool count,
                  const std::string& got = {});

/// Checks ranges, shapes and sizes of a spec: the bounds of its field list
/// (core/spec_fields.hpp), then what no bound says (refs, paths, names).
status validate(const sandbox_spec& spec);

/// Checks an exec request: non-empty argv without NUL, sizes, a cwd in the
/// sandbox path grammar (core/sandbox_path.hpp: absolute, no ".."), env
/// names, a timeout between 0 and 7 days.
status validate(const exec_request& req);

/// Checks every allow-list entry with the backend's parser
/// (net::parse_allow_entry in core/allow_list.hpp): `a.b.c.d:port`,
/// `a.b.c.d/n:port`, `[v6]:port`, `[v6/n]:port` or `domain:port`, port
/// 1-65535 or `*`. More entries than the field list's bound (256) is
/// too_large, more than the kernel's 128 invalid_argument. Resolving names
/// is the backend's job.
status validate(const network_policy& policy);

/// Checks an fncall: language python or bash, code and stdin at most 1 MiB,
/// timeout in (0, 300] s, at most 64 files of 16 MiB in all under relative
/// paths without ".." (core/sandbox_path.hpp).
status validate(const fncall_request& req);

/// Limits of an fncall request.
struct fncall_limits {
  static constexpr size_t max_code = 1u << 20;
  static constexpr size_t max_stdin = 1u << 20;
  static constexpr size_t max_files = 64;
  static constexpr size_t max_file_bytes = 16u << 20;
  static constexpr double max_timeout_s = 300;
};

} // namespace dsec
