// A node's quota volume: one btrfs image with quota groups on, attached to a
// loop device and mounted over <state>/sandboxes, so every sandbox's writable
// upper lives on it. Each sandbox dir is a subvolume with a qgroup limit: a
// sandbox that fills its `disk_mb` gets EDQUOT and the host disk is untouched.
// A subvolume and its limit are two ioctls; nothing is formatted per sandbox.
// (Btrfs, because this kernel has no CONFIG_QUOTA: ext4 and XFS project
// quotas are not available; qgroups do not need it.)
//
// The image is never sparse. A sparse image that meets a full host disk gets
// ENOSPC on a write btrfs had already committed to, btrfs aborts the
// transaction and the volume turns read-only until it is remounted: every
// create fails, and so does every sandbox's next write. Instead every block of
// the image is allocated on the host (fallocate) and the volume grows on
// demand: when its free space falls below a low-water mark, the image is
// extended, the loop device's capacity re-read and btrfs resized online, up
// to a maximum. A host disk that is full then stops the growth, and the
// volume's own space runs out as a plain ENOSPC inside it, never a
// read-only file system.
//
// The image is made (mkfs.btrfs, quota enabled) once and reused; a volume
// already mounted (a node restarted after kill -9, its sandboxes alive) is
// taken over as it is. The loop device autoclears on the last unmount.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.hpp"

namespace dsec::sys {

/// What growth leaves free on the host's file system: the node's own state
/// (records, layer mounts, logs) needs room beside the volume.
constexpr uint64_t quota_keep_host_free = uint64_t{256} << 20;

class quota_volume {
 public:
  /// Mounts (or takes over) the volume at `mount_dir`, backed by `image`,
  /// which may grow to `max_bytes` (made with initial_bytes(max_bytes) if
  /// missing). The holes of an older sparse image are filled when the host has
  /// room (else `warning` says why not). Blocking: runs mkfs once.
  [[nodiscard]] static expected<quota_volume> open(const std::string& image,
                                                   const std::string& mount_dir,
                                                   uint64_t max_bytes,
                                                   std::string* warning = nullptr);

  /// What a new image starts with: 2 GiB, or all of `max_bytes` if less.
  static uint64_t initial_bytes(uint64_t max_bytes);

  /// Free space below which the volume grows: a quarter of its size, at
  /// least 512 MiB. Pure, for tests.
  static uint64_t low_water(uint64_t size_bytes);

  /// How much to grow a volume of `size_bytes` by (half its size, at least
  /// 1 GiB), within `max_bytes` and leaving `keep_host_free` of the host's
  /// `host_free` bytes; 0 if not even 64 MiB can be had. Pure, for tests.
  static uint64_t growth_step(uint64_t size_bytes, uint64_t max_bytes, uint64_t host_free,
                              uint64_t keep_host_free);

  /// Grows the volume if its free space is below low_water(): extends the
  /// image (every block allocated), re-reads the loop device's capacity and
  /// resizes btrfs online. Returns the bytes added (0: no need, at the
  /// maximum, or the host has no room to spare). Blocking (fallocate and a
  /// resize); thread-safe. Never call it from an actor's scheduler thread.
  [[nodiscard]] expected<uint64_t> grow_if_low(uint64_t keep_host_free = quota_keep_host_free) const;

  /// Free bytes inside the volume (statfs of its mount). Cheap.
  [[nodiscard]] expected<uint64_t> free_bytes() const;

  /// The image's size now (what btrfs may use) and the most it may grow to.
  uint64_t size_bytes() const;
  uint64_t max_bytes() const { return max_bytes_; }

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
  std::string image_;
  uint64_t max_bytes_ = 0;
  std::shared_ptr<std::mutex> grow_mu_ = std::make_shared<std::mutex>();
};

} // namespace dsec::sys
