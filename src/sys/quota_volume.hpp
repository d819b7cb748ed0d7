// A node's quota volume: one sparse btrfs image with quota groups on,
// attached to a loop device and mounted over <state>/sandboxes, so every
// sandbox's writable upper lives on it. Each sandbox dir is a subvolume with
// a qgroup limit: a sandbox that fills its `disk_mb` gets EDQUOT and the host
// disk is untouched. A subvolume and its limit are two ioctls; nothing is
// formatted per sandbox. (Btrfs, because this kernel has no CONFIG_QUOTA:
// ext4 and XFS project quotas are not available; qgroups do not need it.)
//
// The image is made (mkfs.btrfs, quota enabled) once and reused; a volume
// already mounted (a node restarted after kill -9, its sandboxes alive) is
// taken over as it is. The loop device autoclears on the last unmount.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dsec::sys {

class quota_volume {
 public:
  /// Mounts (or takes over) the volume at `mount_dir`, backed by `image`
  /// (created sparse with `size_bytes` if missing). Blocking: runs mkfs once.
  [[nodiscard]] static expected<quota_volume> open(const std::string& image,
                                                   const std::string& mount_dir,
                                                   uint64_t size_bytes);

  /// Creates `dir` (directly on the volume, must not exist) as a subvolume
  /// limited to `bytes`; everything below it is charged to it. An ordinary
  /// recursive removal deletes it.
  [[nodiscard]] status make_limited_dir(const std::string& dir, uint64_t bytes) const;

  /// Unmounts the volume (the loop device detaches itself). Call when no
  /// sandbox is left on it.
  [[nodiscard]] status unmount() const;

  const std::string& device() const { return device_; }
  const std::string& mount_dir() const { return mount_dir_; }

 private:
  std::string device_;
  std::string mount_dir_;
};

} // namespace dsec::sys
