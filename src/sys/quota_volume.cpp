// Quota volume implementation (see quota_volume.hpp).
#include "sys/quota_volume.hpp"

#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys/fd.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::sys {

namespace {

/// The source device of the visible mount at `dir`; empty if none.
std::string mounted_device(const std::string& dir) {
  std::string found;
  for (auto& m : mounts())
    if (m.point == dir)
      found = m.source; // the last mount on a path is the visible one
  return found;
}

/// A loop device attached to an image; the fd keeps it attached.
struct attached {
  std::string dev;
  unique_fd fd;
};

/// Attaches `image` to a free loop device that detaches when its last user
/// (this fd, then the mount) goes away.
expected<attached> attach_loop(const std::string& image) {
  unique_fd file{::open(image.c_str(), O_RDWR | O_CLOEXEC)};
  if (!file)
    return sys_error("open", image, errno);
  unique_fd ctl{::open("/dev/loop-control", O_RDWR | O_CLOEXEC)};
  if (!ctl)
    return sys_error("open", "/dev/loop-control", errno, errc::unavailable);
  for (int attempt = 0; attempt < 8; ++attempt) {
    int n = ::ioctl(ctl.get(), LOOP_CTL_GET_FREE);
    if (n < 0)
      return sys_error("LOOP_CTL_GET_FREE for", image, errno, errc::unavailable);
    auto dev = "/dev/loop" + std::to_string(n);
    unique_fd loop{::open(dev.c_str(), O_RDWR | O_CLOEXEC)};
    if (!loop)
      return sys_error("open", dev, errno);
    loop_config cfg{};
    cfg.fd = static_cast<uint32_t>(file.get());
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (::ioctl(loop.get(), LOOP_CONFIGURE, &cfg) == 0)
      return attached{dev, std::move(loop)};
    if (errno != EBUSY) // taken between GET_FREE and CONFIGURE: try another
      return sys_error("LOOP_CONFIGURE", dev + " with " + image, errno);
  }
  return unavailable("attach " + image + ": no free loop device");
}

status make_image(const std::string& image, uint64_t size_bytes) {
  unique_fd f{::open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!f)
    return sys_error("create", image, errno);
  if (::ftruncate(f.get(), static_cast<off_t>(size_bytes)) != 0) {
    auto err = errno;
    ::unlink(image.c_str());
    return sys_error("size", image, err);
  }
  f.reset();
  auto r = run_command({"mkfs.btrfs", "-q", "-f", image});
  if (!r || r->exit_code != 0) {
    ::unlink(image.c_str());
    return internal_error("mkfs.btrfs " + image + ": "
                          + (r ? r->output.substr(0, 400) : r.err().message));
  }
  return {};
}

/// Turns quota groups on (idempotent; persists in the filesystem).
status enable_quota(const std::string& mount_dir) {
  unique_fd fd{::open(mount_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!fd)
    return sys_error("open", mount_dir, errno);
  btrfs_ioctl_quota_ctl_args q{};
  q.cmd = BTRFS_QUOTA_CTL_ENABLE;
  if (::ioctl(fd.get(), BTRFS_IOC_QUOTA_CTL, &q) != 0)
    return sys_error("enable quota groups on", mount_dir, errno);
  return {};
}

} // namespace

expected<quota_volume> quota_volume::open(const std::string& image, const std::string& mount_dir,
                                          uint64_t size_bytes) {
  quota_volume v;
  v.mount_dir_ = mount_dir;
  if (auto dev = mounted_device(mount_dir); !dev.empty()) { // taken over after a restart
    v.device_ = dev;
    return v;
  }
  if (!exists(image))
    if (auto st = make_image(image, size_bytes); !st)
      return st.err();
  auto loop = attach_loop(image);
  if (!loop)
    return loop.err();
  // From here the mount holds the loop device; it detaches when the mount
  // goes. Until then loop->fd does (closing it on failure detaches it).
  if (::mount(loop->dev.c_str(), mount_dir.c_str(), "btrfs", MS_NOATIME | MS_NOSUID | MS_NODEV,
              nullptr)
      != 0)
    return sys_error("mount btrfs " + loop->dev, mount_dir, errno);
  if (auto st = enable_quota(mount_dir); !st) {
    ::umount2(mount_dir.c_str(), MNT_DETACH);
    return st.err();
  }
  ::chmod(mount_dir.c_str(), 0700);
  v.device_ = loop->dev;
  return v;
}

status quota_volume::make_limited_dir(const std::string& dir, uint64_t bytes) const {
  auto slash = dir.find_last_of('/');
  auto parent = dir.substr(0, slash), name = dir.substr(slash + 1);
  unique_fd pfd{::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!pfd)
    return sys_error("open", parent, errno);
  btrfs_ioctl_vol_args args{};
  if (name.empty() || name.size() > BTRFS_PATH_NAME_MAX)
    return invalid_argument("subvolume name of " + dir);
  std::memcpy(args.name, name.data(), name.size());
  if (::ioctl(pfd.get(), BTRFS_IOC_SUBVOL_CREATE, &args) != 0)
    return sys_error("create subvolume", dir, errno, errno == EEXIST ? errc::conflict : errc::internal);
  ::chmod(dir.c_str(), 0700);
  unique_fd fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  btrfs_ioctl_qgroup_limit_args lim{};
  lim.qgroupid = 0; // the subvolume the fd is in
  lim.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  lim.lim.max_rfer = bytes;
  if (!fd || ::ioctl(fd.get(), BTRFS_IOC_QGROUP_LIMIT, &lim) != 0) {
    auto err = errno;
    ::rmdir(dir.c_str());
    return sys_error("limit subvolume", dir, err);
  }
  return {};
}

status quota_volume::unmount() const {
  if (::umount2(mount_dir_.c_str(), 0) != 0 && errno != EINVAL)
    return sys_error("unmount", mount_dir_, errno);
  return {};
}

} // namespace dsec::sys
