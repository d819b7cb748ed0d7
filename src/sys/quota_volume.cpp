// Quota volume implementation (see quota_volume.hpp).
#include "sys/quota_volume.hpp"

#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

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

constexpr uint64_t MiB = uint64_t{1} << 20, GiB = uint64_t{1} << 30;

/// Free bytes of the file system that holds `path`.
uint64_t host_free_bytes(const std::string& path) {
  struct statvfs fs {};
  auto dir = path.substr(0, std::max<size_t>(1, path.find_last_of('/')));
  if (::statvfs(dir.c_str(), &fs) != 0)
    return 0;
  return uint64_t(fs.f_bavail) * fs.f_frsize;
}

/// Allocates every block of [0, size) of `fd` on the host (holes too).
status allocate(int fd, const std::string& image, uint64_t size) {
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0)
    return {};
  auto err = errno;
  return sys_error("allocate " + std::to_string(size / MiB) + " MiB for", image, err,
                   err == ENOSPC ? errc::resource_exhausted : errc::internal);
}

status make_image(const std::string& image, uint64_t size_bytes) {
  unique_fd f{::open(image.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!f)
    return sys_error("create", image, errno);
  if (auto st = allocate(f.get(), image, size_bytes); !st) {
    ::unlink(image.c_str());
    return st;
  }
  f.reset();
  // -K: no TRIM of the image, which would punch holes in it.
  auto r = run_command({"mkfs.btrfs", "-q", "-f", "-K", image});
  if (!r || r->exit_code != 0) {
    ::unlink(image.c_str());
    return internal_error("mkfs.btrfs " + image + ": "
                          + (r ? r->output.substr(0, 400) : r.err().message));
  }
  return {};
}

/// Allocates the holes of an image an older node made sparse, if the host
/// can spare them (at most half its free space); else says why not.
std::string fill_holes(const std::string& image) {
  struct stat st {};
  if (::stat(image.c_str(), &st) != 0)
    return {};
  uint64_t size = uint64_t(st.st_size), allocated = uint64_t(st.st_blocks) * 512;
  if (allocated >= size)
    return {};
  uint64_t holes = size - allocated, host = host_free_bytes(image);
  auto risk = image + " is sparse (" + std::to_string(holes / MiB)
              + " MiB not allocated on the host): a full host disk can turn the sandbox volume"
                " read-only. Remove it while the node is stopped and no sandbox is left, and the"
                " next start makes one that is never sparse";
  if (holes > host / 2)
    return risk + " (the host has " + std::to_string(host / MiB) + " MiB free)";
  unique_fd f{::open(image.c_str(), O_RDWR | O_CLOEXEC)};
  if (!f)
    return risk + " (open: " + std::strerror(errno) + ")";
  if (auto a = allocate(f.get(), image, size); !a)
    return risk + " (" + a.err().message + ")";
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

uint64_t quota_volume::initial_bytes(uint64_t max_bytes) { return std::min(max_bytes, 2 * GiB); }

uint64_t quota_volume::low_water(uint64_t size_bytes) { return std::max(size_bytes / 4, GiB); }

uint64_t quota_volume::growth_step(uint64_t size_bytes, uint64_t max_bytes, uint64_t host_free,
                                   uint64_t keep_host_free) {
  if (size_bytes >= max_bytes)
    return 0;
  uint64_t step = std::min(std::max(size_bytes / 2, GiB), max_bytes - size_bytes);
  step = std::min(step, host_free > keep_host_free ? host_free - keep_host_free : 0);
  step &= ~(MiB - 1); // whole MiB: the loop device counts sectors, btrfs pages
  return step >= 64 * MiB ? step : 0;
}

expected<quota_volume> quota_volume::open(const std::string& image, const std::string& mount_dir,
                                          uint64_t max_bytes, std::string* warning) {
  quota_volume v;
  v.mount_dir_ = mount_dir;
  v.image_ = image;
  v.max_bytes_ = max_bytes;
  if (exists(image))
    if (auto why = fill_holes(image); !why.empty() && warning)
      *warning = why;
  if (auto dev = mounted_device(mount_dir); !dev.empty()) { // taken over after a restart
    v.device_ = dev;
    return v;
  }
  if (!exists(image))
    if (auto st = make_image(image, initial_bytes(max_bytes)); !st)
      return st.err();
  auto loop = attach_loop(image);
  if (!loop)
    return loop.err();
  // From here the mount holds the loop device; it detaches when the mount
  // goes. Until then loop->fd does (closing it on failure detaches it).
  // nodiscard: btrfs discards freed space by default on a device that takes
  // it, and a loop device turns a discard into a hole in the image.
  if (::mount(loop->dev.c_str(), mount_dir.c_str(), "btrfs", MS_NOATIME | MS_NOSUID | MS_NODEV,
              "nodiscard")
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

uint64_t quota_volume::size_bytes() const {
  struct stat st {};
  return ::stat(image_.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

expected<uint64_t> quota_volume::free_bytes() const {
  struct statvfs fs {};
  if (::statvfs(mount_dir_.c_str(), &fs) != 0)
    return sys_error("statfs", mount_dir_, errno);
  return uint64_t(fs.f_bavail) * fs.f_frsize;
}

expected<uint64_t> quota_volume::grow_if_low(uint64_t keep_host_free) const {
  std::lock_guard lock{*grow_mu_};
  auto free = free_bytes();
  if (!free)
    return free.err();
  uint64_t size = size_bytes();
  if (size == 0 || *free >= low_water(size))
    return uint64_t{0};
  uint64_t step = growth_step(size, max_bytes_, host_free_bytes(image_), keep_host_free);
  if (step == 0)
    return uint64_t{0};
  unique_fd f{::open(image_.c_str(), O_RDWR | O_CLOEXEC)};
  if (!f)
    return sys_error("open", image_, errno);
  if (auto st = allocate(f.get(), image_, size + step); !st) {
    (void)!::ftruncate(f.get(), static_cast<off_t>(size)); // give back a partial allocation
    return st.err();
  }
  // The loop device reads the image's new size, then btrfs takes all of it.
  unique_fd loop{::open(device_.c_str(), O_RDWR | O_CLOEXEC)};
  if (!loop || ::ioctl(loop.get(), LOOP_SET_CAPACITY, 0) != 0)
    return sys_error("LOOP_SET_CAPACITY on", device_ + " for " + image_, errno);
  unique_fd dir{::open(mount_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  btrfs_ioctl_vol_args args{};
  std::memcpy(args.name, "max", 3);
  if (!dir || ::ioctl(dir.get(), BTRFS_IOC_RESIZE, &args) != 0)
    return sys_error("resize btrfs at", mount_dir_, errno);
  return step;
}

status quota_volume::unmount() const {
  if (::umount2(mount_dir_.c_str(), 0) != 0 && errno != EINVAL)
    return sys_error("unmount", mount_dir_, errno);
  return {};
}

} // namespace dsec::sys
