// The namespaces the launcher thread lives in, which every init is cloned
// from (see launch.hpp, launch_template). Why, measured with perf during a
// burst of creates at 1,600 idle sandboxes: pivot_root spent 3.7% of all
// CPU in chroot_fs_refs, which walks every task on the host under the
// host-wide namespace_sem (so every other mount and CLONE_NEWNS waits), and
// mounting sysfs spent 1.5% in kernfs_test_super (sget compares the new
// mount against every sysfs superblock, one per network namespace that
// mounted it) plus a memcg-aware shrinker per sandbox, which grows every
// memory cgroup's shrinker table. Both costs grow with the sandboxes.
//
// The mount template: the thread takes a mount namespace of its own, puts an
// empty read-only tmpfs on "/", pivots into it (once per node) and detaches
// the host's mounts. A clone then copies a namespace of two mounts (the
// kernel's hidden rootfs and the template) instead of the host's table, and
// init attaches the sandbox root on top of "/" and chroots into it: no
// pivot_root, no task walk. What lies under the sandbox root is the empty
// template, not the host's root (and reaching even that would take
// chroot(2), which needs CAP_SYS_CHROOT: init drops every capability, and
// the seccomp filter refuses new user namespaces, where it could be had).
//
// The sysfs template: the thread also takes a network namespace of its own
// with only a loopback (up, as in a sandbox) and mounts one read-only sysfs
// there, with firmware and powercap masked once. A sandbox without network
// gets a recursive clone of it (the same superblock for all), whose
// /sys/class/net shows that namespace's lo; the rest of sysfs is the host's
// either way.
#include "backends/container/launch.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsec::backends {

namespace {

std::string errno_text(const char* op, int err) {
  return std::string(op) + ": " + std::strerror(err);
}

/// An empty read-only tmpfs, detached.
int empty_tmpfs(std::string& why) {
  sys::unique_fd fs{::fsopen("tmpfs", FSOPEN_CLOEXEC)};
  if (!fs) {
    why = errno_text("fsopen tmpfs", errno);
    return -1;
  }
  if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, "mode", "555", 0) != 0 ||
      ::fsconfig(fs.get(), FSCONFIG_SET_STRING, "size", "4k", 0) != 0 ||
      ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    why = errno_text("create tmpfs", errno);
    return -1;
  }
  int m = ::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  if (m < 0)
    why = errno_text("fsmount tmpfs", errno);
  return m;
}

// SAFETY: only this thread's namespaces change (unshare of a thread; the
// node's other threads keep the host's fs_struct and mount namespace).
std::string enter_mount_template(int empty, bool& unshared) {
  if (::unshare(CLONE_NEWNS) != 0)
    return errno_text("unshare mount namespace", errno);
  unshared = true;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return errno_text("make / private", errno);
  sys::unique_fd top{::open_tree(empty, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)};
  if (!top)
    return errno_text("clone template root", errno);
  if (::move_mount(top.get(), "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return errno_text("attach template root", errno);
  if (::fchdir(top.get()) != 0)
    return errno_text("chdir template root", errno);
  if (::syscall(SYS_pivot_root, ".", ".") != 0)
    return errno_text("pivot_root into template", errno);
  if (::umount2(".", MNT_DETACH) != 0)
    return errno_text("detach host mounts", errno);
  if (::chdir("/") != 0)
    return errno_text("chdir /", errno);
  return {};
}

std::string loopback_up() {
  sys::unique_fd s{::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
  if (!s)
    return errno_text("socket", errno);
  ifreq ifr{};
  std::strcpy(ifr.ifr_name, "lo");
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0)
    return errno_text("get lo flags", errno);
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0)
    return errno_text("set lo up", errno);
  return {};
}

// The masks runc applies (setup.cpp's setup_sys names why), here as clones
// of the empty template tmpfs moved onto the detached sysfs tree.
std::string make_sysfs(int empty, sys::unique_fd& out) {
  if (::unshare(CLONE_NEWNET) != 0)
    return errno_text("unshare network namespace", errno);
  if (auto e = loopback_up(); !e.empty())
    return e;
  sys::unique_fd fs{::fsopen("sysfs", FSOPEN_CLOEXEC)};
  if (!fs || ::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return errno_text("create sysfs", errno);
  sys::unique_fd tree{::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                  MOUNT_ATTR_NOEXEC)};
  if (!tree)
    return errno_text("fsmount sysfs", errno);
  for (const char* d : {"firmware", "devices/virtual/powercap"}) {
    struct stat st {};
    if (::fstatat(tree.get(), d, &st, 0) != 0)
      continue;
    sys::unique_fd mask{::open_tree(empty, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)};
    if (!mask || ::move_mount(mask.get(), "", tree.get(), d, MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return errno_text((std::string("mask sysfs ") + d).c_str(), errno);
  }
  out = std::move(tree);
  return {};
}

} // namespace

launch_template enter_launch_template(bool mount_ns, bool sysfs) {
  launch_template t;
  if (!mount_ns && !sysfs)
    return t;
  std::string why;
  sys::unique_fd empty{empty_tmpfs(why)};
  if (!empty) {
    t.error = why;
    return t;
  }
  if (sysfs) {
    if (auto e = make_sysfs(empty.get(), t.sysfs); !e.empty())
      t.error = "shared sysfs: " + e;
  }
  if (mount_ns) {
    bool unshared = false;
    if (auto e = enter_mount_template(empty.get(), unshared); e.empty()) {
      t.mount_ns = true;
    } else {
      t.error += (t.error.empty() ? "" : "; ") + ("mount template: " + e);
      t.broken = unshared; // a half-made namespace: this thread must not launch
    }
  }
  return t;
}

} // namespace dsec::backends
