// Names for layer refs, kept beside the catalog in <store>/aliases.json and
// written by `dsec layer alias NAME REF`: a template name for E2B's
// templateID (actors/e2b_control.cpp), so a team picks "swe-env" once and
// moves it to a new layer version without touching its trainer code.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "layers/store.hpp"

namespace dsec::layers {

/// Alias name -> layer ref (name@version).
using alias_map = std::map<std::string, std::string>;

/// A name is 1-64 of [a-z0-9._-], starting with a letter or digit: never a
/// ref (no '@') nor a path.
status check_alias_name(std::string_view name);

/// The aliases of the store at `root`; none if it has no aliases.json. A
/// corrupt file is an error naming it. Blocking (one small read).
expected<alias_map> read_aliases(const std::string& root);

/// Points `name` at `ref`, which must be a layer of `s` (not_found names it).
/// Written under the catalog lock, atomically. Blocking.
status set_alias(const store& s, const std::string& name, const std::string& ref);

/// Removes `name`; not_found if `s` has no such alias. Blocking.
status remove_alias(const store& s, const std::string& name);

} // namespace dsec::layers
