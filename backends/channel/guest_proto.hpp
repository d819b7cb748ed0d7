// The file channel of a guest VM (microvm and vm backends): a second
// virtio-serial port, "dsec.files", served by the guest's PID 1 (guest.cpp)
// outside the agent's seccomp filter. Same framing as the init protocol
// (protocol.hpp); one request at a time, each answered by one frame with the
// request's id. Container sandboxes do not use it: the node reaches their
// files through the overlay root on the host.
//
//   put  (node -> guest): str path, u32 mode, str data   -> file_ok | file_err
//   get  (node -> guest): str path, u64 max_bytes          -> file_data | file_err
//   identity (node -> guest): u64 unix time in ns, str seed, str hostname
//        -> file_ok | file_err
//        sets the guest clock, mixes `seed` into the kernel's entropy pool
//        and reseeds its CRNG, and sets the hostname unless empty: sent after
//        every restore (template clones must not share random state nor the
//        template's hostname; a resumed guest's clock is stale).
//   file_err: u8 kind, u32 errno, str what (operation and path), u64 size
#pragma once

#include "backends/channel/protocol.hpp"

namespace dsec::guest_proto {

constexpr auto put = static_cast<init_proto::msg>(64);
constexpr auto get = static_cast<init_proto::msg>(65);
constexpr auto identity = static_cast<init_proto::msg>(66);
constexpr auto file_ok = static_cast<init_proto::msg>(70);
constexpr auto file_data = static_cast<init_proto::msg>(71);
constexpr auto file_err = static_cast<init_proto::msg>(72);

/// Kinds of file_err.
enum class err_kind : uint8_t {
  sys = 0,         ///< a system call failed: errno and the operation in `what`
  not_regular = 1, ///< the path is not a regular file
  too_large = 2,   ///< the file is larger than max_bytes; `size` says how large
};

/// Names of the virtio-serial ports (virtserialport name=...).
constexpr const char* ctl_port = "dsec.ctl";
constexpr const char* files_port = "dsec.files";

} // namespace dsec::guest_proto
