// CAF inspect() for fs_entry (core/fs_entry.hpp); the wire name is registered
// in actors/wire_types.cpp.
#pragma once

#include <caf/meta/type_name.hpp>

#include "core/fs_entry.hpp"

namespace dsec {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fs_entry& x) {
  return f(caf::meta::type_name("dsec::fs_entry"), x.name, x.path, x.type, x.size, x.mode, x.uid,
           x.gid, x.mtime_ns, x.symlink_target, x.metadata);
}

} // namespace dsec
