// What an E2B create of a built-in template (`base`, `python`, `busybox`,
// `code-interpreter-v1`) says when the node's store lacks its layers
// (issue 27): the command that builds them. A quick-start node has the
// plain defaults but not E2B's base, which takes `--e2b`. Pure, for unit
// tests.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::e2b {

/// The command that builds the layers of built-in template `template_id`
/// ("" for a template that is not built in).
std::string default_layers_command(std::string_view template_id);

/// `err` (the create's failure) with that command appended when it is a
/// not_found of a built-in template's layer; otherwise `err` as it was.
error with_default_layers_hint(error err, std::string_view template_id);

} // namespace dsec::e2b
