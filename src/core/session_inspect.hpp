// CAF inspect() for session_info (core/session.hpp); the wire name is
// registered in actors/wire_types.cpp.
#pragma once

#include <caf/meta/type_name.hpp>

#include "core/session.hpp"

namespace dsec {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_info& x) {
  return f(caf::meta::type_name("dsec::session_info"), x.id, x.shell, x.alive, x.runs,
           x.created_at_ms, x.reason);
}

} // namespace dsec
