// The seccomp filter of every sandbox, compiled once per node. libseccomp
// turns the deny list into a classic BPF program here, on the node; the raw
// instructions travel to dsec-init in the `config` frame and init installs
// them with seccomp(2), in a container or in a VM's guest alike. Compiling in every init cost ~0.6 ms
// per create and made init link libseccomp.
#pragma once

#include <string>

#include "core/error.hpp"

namespace dsec::backends {

/// The filter as raw `struct sock_filter` instructions (8 bytes each), for
/// the architecture this node runs on: a wrong-architecture caller is killed,
/// the denied syscalls fail with EPERM (clone3 with ENOSYS), the rest is
/// allowed.
expected<std::string> build_seccomp_program();

} // namespace dsec::backends
