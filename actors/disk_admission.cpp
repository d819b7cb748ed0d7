// Admission by free space on the state volume (see disk_admission.hpp).
#include "actors/disk_admission.hpp"

#include <sys/statvfs.h>

namespace dsec {

error disk_admission_error(const std::string& node, const std::string& state_dir,
                           uint64_t min_free) {
  struct statvfs fs {};
  // One statvfs: microseconds on a local file system, no I/O wait.
  if (state_dir.empty() || ::statvfs(state_dir.c_str(), &fs) != 0)
    return {};
  uint64_t free = uint64_t(fs.f_bavail) * fs.f_frsize;
  if (free >= min_free)
    return {};
  return resource_exhausted("create: node " + node + "'s state volume (" + state_dir
                            + ") is full: " + std::to_string(free >> 20) + " MiB free, "
                            + std::to_string(min_free >> 20)
                            + " MiB needed; its running sandboxes keep running; retry later or"
                              " on another node");
}

error volume_admission_error(const std::string& node, const sys::quota_volume* volume,
                             uint64_t min_free) {
  if (!volume)
    return {};
  auto free = volume->free_bytes();
  if (!free || *free >= min_free)
    return {};
  return resource_exhausted("create: node " + node + "'s sandbox volume ("
                            + volume->mount_dir() + ") is full: " + std::to_string(*free >> 20)
                            + " MiB free of " + std::to_string(volume->size_bytes() >> 20)
                            + " MiB, and it cannot grow now (its maximum is "
                            + std::to_string(volume->max_bytes() >> 20)
                            + " MiB); its running sandboxes keep running; retry later or on"
                              " another node");
}

} // namespace dsec
