// Spec equality over the one field list (core/spec_fields.hpp).
#include "core/spec_fields.hpp"

namespace dsec {

bool same_request(const sandbox_spec& a, const sandbox_spec& b) { return equal_fields(a, b); }

} // namespace dsec
