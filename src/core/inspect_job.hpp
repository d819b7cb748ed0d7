// inspect() overloads of the job-level types (core/job.hpp), as
// core/inspect.hpp does for the rest; registered in actors/wire_types.cpp.
// Field order is the wire order: append only.
#pragma once

#include <caf/meta/type_name.hpp>

#include "core/job.hpp"

namespace dsec {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_item_error& x) {
  return f(caf::meta::type_name("dsec::job_item_error"), x.id, x.node, x.code, x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_result& x) {
  return f(caf::meta::type_name("dsec::job_result"), x.done, x.errors);
}

} // namespace dsec
