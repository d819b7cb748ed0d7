// Admission by free space on the node's state volume (issue 28): a node whose
// state volume is full refuses creates at once with a clear, retryable error
// (429, so placement moves on to another node), instead of failing half-way
// through a create with "mkdir ...: ENOSPC" as an internal error. Its running
// sandboxes keep running; creates come back as soon as space does.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "sys/quota_volume.hpp"

namespace dsec {

/// Free space below which a node takes no new sandbox: 64 MiB holds a
/// sandbox's record, its layer mount points and the first writes of a few
/// creates in flight. Lower lets creates fail half-way on ENOSPC; higher
/// refuses creates on small volumes that still had room.
constexpr uint64_t min_free_state_bytes = uint64_t{64} << 20;

/// Why `node` cannot admit a create with `state_dir` as it is now; none if it
/// can, or if the space cannot be read (the create then finds out itself).
error disk_admission_error(const std::string& node, const std::string& state_dir,
                           uint64_t min_free = min_free_state_bytes);

/// The same for the node's sandbox volume (sys/quota_volume.hpp), where every
/// sandbox's writes go: below `min_free` it is full and cannot grow (it is at
/// its maximum, or the host has no room), since growth keeps it far above
/// that otherwise. None without a volume.
error volume_admission_error(const std::string& node, const sys::quota_volume* volume,
                             uint64_t min_free = min_free_state_bytes);

} // namespace dsec
