// The grammar of a layer ref, `name@version`: the one parser of that input.
// Request validation (core/validate.cpp) calls it at the edge and the layer
// store, the catalog and the image fetcher call it again, so every ref the
// gateway accepts is one the store can look up. Pure and standard-library only.
//
//   name     [a-z0-9][a-z0-9._/-]*, at most 128 characters, no "..", no "//",
//            no trailing '/'               base/python, ws/django-15202
//   version  [A-Za-z0-9._-]+, at most 64 characters      3.11, 1, v2-rc.1
//   ref      name@version, split at the last '@'         base/python@3.11
#pragma once

#include <string>

#include "core/error.hpp"

namespace dsec::layers {

/// Checks a layer name: [a-z0-9][a-z0-9._/-]*, at most 128 characters, no
/// "..", no "//", no trailing '/'. The error names the rule that failed.
status validate_name(const std::string& name);

/// Checks a layer version: [A-Za-z0-9._-]+, at most 64 characters.
status validate_version(const std::string& version);

/// A parsed `name@version`.
struct layer_ref {
  std::string name;
  std::string version;
};

/// Splits and validates `name@version`; invalid_argument names what is wrong.
expected<layer_ref> parse_ref(const std::string& ref);

} // namespace dsec::layers
