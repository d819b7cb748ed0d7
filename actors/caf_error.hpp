// The edge between dsec::error and caf::error: errors of category "dsec"
// carry the code and the message, so they survive forwarding between nodes.
#pragma once

#include <caf/error.hpp>

#include "core/error.hpp"

namespace dsec {

/// The caf::error category of dsec errors.
caf::atom_value dsec_error_category();

/// dsec::error -> caf::error (category "dsec", the message as context).
caf::error to_caf(const error& err);

/// caf::error -> dsec::error; CAF's own errors (request timeout, dead actor,
/// ...) become timeout or unavailable with CAF's text.
error from_caf(const caf::error& err);

} // namespace dsec
