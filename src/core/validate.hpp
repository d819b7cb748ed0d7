// What a well-formed sandbox spec and exec request are, whoever built them:
// the JSON parsers call these after decoding, and the lifecycle actor calls
// them again for requests that arrive over the native protocol (the Python
// SDK), which never pass through JSON. Every failure is an invalid_argument
// (or too_large) naming the field.
#pragma once

#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec {

/// True if `ref` looks like `name@version`.
bool valid_layer_ref(std::string_view ref);

/// Checks ranges, shapes and sizes of a spec (spec_limits).
status validate(const sandbox_spec& spec);

/// Checks an exec request: non-empty argv without NUL, sizes, an absolute
/// cwd, env names, a timeout between 0 and 7 days.
status validate(const exec_request& req);

} // namespace dsec
