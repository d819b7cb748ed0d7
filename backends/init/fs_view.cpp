// The sandbox's filesystem view, as dsec-init builds it on itself (see
// fs_view.hpp): the scratch tmpfs behind /dev, /dev/shm and every mask, a
// new /proc with masked and read-only paths and the sandbox's own boot id,
// a read-only /sys, and the spec's protection mounts.
#include "backends/init/fs_view.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/channel/protocol.hpp"
#include "backends/init/setup.hpp"

namespace dsec::init {

std::string do_mount(const char* src, const std::string& dst, const char* type,
                     unsigned long flags, const char* data) {
  if (::mount(src, dst.c_str(), type, flags, data) != 0)
    return errno_message((std::string("mount ") + (type ? type : "bind")).c_str(),
                         dst, errno);
  return {};
}

namespace {

std::string make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return errno_message("mkdir", path, errno);
  return {};
}

constexpr unsigned long nosuid_nodev_noexec = MS_NOSUID | MS_NODEV | MS_NOEXEC;

// One tmpfs per sandbox behind /dev, /dev/shm and every masking mount (the
// /proc and /sys masks, hidden protect dirs), as clones of subdirs of one
// detached tmpfs mount that is attached nowhere itself. Why one: every
// superblock on the host registers a memcg-aware shrinker, and the kernel
// sizes each memory cgroup's shrinker table by the highest shrinker count
// the host ever had (1 KiB per 64), so each superblock per sandbox costs
// every sandbox's memcg memory, and growing the table walks every memcg.
// Separate tmpfs mounts made 10 superblocks per sandbox; now 6 (overlay,
// this tmpfs, devpts, proc, sysfs, and the ipc namespace's mqueue).
// Subdirs: dev/ (the /dev tree), shm/ (/dev/shm), empty/ (masks), hidden/
// (mode 000, hidden protect dirs). Only dev/ and shm/ are reachable from
// inside, so nothing the agent writes shows up in a mask. Open during setup
// only: closed once setup_protect is done (in the launch template it is
// attached under the root, park_scratch_on_template; elsewhere the detached
// parent dissolves).
int scratch_fd = -1;
// Kernels before 6.15 refuse to clone (open_tree) from a mount that is in no
// namespace (EINVAL): the microVM guest's kernel among them. There the
// scratch tmpfs is first attached at <parent of the root>/.dsec-scratch, in
// init's own mount namespace (private: the host never sees it), outside the
// sandbox's root, and detached again at close_scratch.
std::string scratch_parent, scratch_path;

/// Attaches the scratch tmpfs at scratch_path so that clones of it work on
/// an older kernel; scratch_fd then names the attached mount. 0 or errno.
int attach_scratch_parent() {
  // In the launch template the root is "/": no place outside it.
  if (scratch_parent.empty())
    return EINVAL;
  auto slash = scratch_parent.find_last_of('/');
  auto path = (slash == std::string::npos || slash == 0 ? std::string{}
                                                        : scratch_parent.substr(0, slash))
              + "/.dsec-scratch";
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return errno;
  if (::move_mount(scratch_fd, "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return errno;
  int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  ::close(scratch_fd);
  scratch_fd = fd;
  scratch_path = path;
  return 0;
}

std::string make_scratch(const std::string& root) {
  scratch_parent = root;
  int fs = ::fsopen("tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0)
    return errno_message("fsopen", "tmpfs", errno);
  int rc = ::fsconfig(fs, FSCONFIG_SET_STRING, "mode", "755", 0);
  if (rc == 0)
    rc = ::fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0);
  // nosuid, noexec on every clone; nodev on all but dev/ (below).
  if (rc == 0)
    scratch_fd = ::fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
  int err = errno;
  ::close(fs);
  if (rc != 0 || scratch_fd < 0)
    return errno_message("mount tmpfs", "/dev", err);
  struct sub { const char* name; mode_t mode; };
  static const sub subs[] = {{"dev", 0755}, {"shm", 01777}, {"empty", 0555}, {"hidden", 0}};
  for (auto& d : subs)
    if (::mkdirat(scratch_fd, d.name, 0700) != 0 || ::fchmodat(scratch_fd, d.name, d.mode, 0) != 0)
      return errno_message("mkdir", std::string("tmpfs ") + d.name, errno);
  return {};
}

} // namespace

// In the launch template the scratch tmpfs is attached on "/" before the
// sandbox's root goes on top of it: under the root, outside the chroot,
// where nothing inside reaches it (nor lists it: mountinfo leaves out what
// lies outside a process's root). Closing a detached mount's last fd
// dissolves it, and that waits for an expedited RCU grace period (the
// kernel's namespace_unlock): one per create, with every create in flight
// waiting on the same grace periods, which O(sandboxes) kernel walks under
// RCU (the cpu quota's) stretch as the node fills. An attached one closes
// at no cost, and goes with the mount namespace when init exits.
std::string park_scratch_on_template() {
  TRY(make_scratch(""));
  if (::move_mount(scratch_fd, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return errno_message("move_mount scratch tmpfs", "/", errno);
  return {};
}

void close_scratch() {
  if (scratch_fd >= 0)
    ::close(scratch_fd);
  scratch_fd = -1;
  if (!scratch_path.empty()) {
    ::umount2(scratch_path.c_str(), MNT_DETACH);
    ::rmdir(scratch_path.c_str());
    scratch_path.clear();
  }
}

namespace {

/// Clones subdir `sub` of the scratch tmpfs, adds `attrs`, and moves the
/// clone onto `target` (an fd, or a path if target_path is set). 0 or errno.
int attach_scratch(const char* sub, uint64_t attrs, int target, const char* target_path) {
  int tree = ::open_tree(scratch_fd, sub, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (tree < 0 && errno == EINVAL && scratch_path.empty()) {
    if (int err = attach_scratch_parent(); err != 0)
      return err;
    tree = ::open_tree(scratch_fd, sub, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  }
  if (tree < 0)
    return errno;
  mount_attr attr{};
  attr.attr_set = attrs;
  int err = 0;
  unsigned to = target_path ? 0 : MOVE_MOUNT_T_EMPTY_PATH;
  if ((attrs && ::mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) ||
      ::move_mount(tree, "", target, target_path ? target_path : "",
                   MOVE_MOUNT_F_EMPTY_PATH | to) != 0)
    err = errno;
  ::close(tree);
  return err;
}

constexpr uint64_t mask_attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV;

/// Covers directory `path` with the empty, read-only mask.
std::string mask_dir(const std::string& path) {
  if (int err = attach_scratch("empty", mask_attrs, AT_FDCWD, path.c_str()); err != 0)
    return errno_message("mount mask", path, err);
  return {};
}

} // namespace

std::string setup_dev(const std::string& root) {
  auto dev = root + "/dev";
  TRY(make_dir(dev, 0755));
  if (scratch_fd < 0)
    TRY(make_scratch(root));
  struct node { const char* name; unsigned maj, min; };
  static const node nodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                               {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
  for (auto& n : nodes) {
    auto p = std::string("dev/") + n.name;
    if (::mknodat(scratch_fd, p.c_str(), S_IFCHR | 0666, makedev(n.maj, n.min)) != 0)
      return errno_message("mknod", dev + "/" + n.name, errno);
    ::fchmodat(scratch_fd, p.c_str(), 0666, 0); // mknod honours the umask
  }
  static const char* links[][2] = {{"/proc/self/fd", "fd"},        {"/proc/self/fd/0", "stdin"},
                                   {"/proc/self/fd/1", "stdout"},  {"/proc/self/fd/2", "stderr"},
                                   {"pts/ptmx", "ptmx"}};
  for (auto& l : links)
    if (::symlinkat(l[0], scratch_fd, (std::string("dev/") + l[1]).c_str()) != 0)
      return errno_message("symlink", dev + "/" + l[1], errno);
  for (const char* d : {"dev/pts", "dev/shm"})
    if (::mkdirat(scratch_fd, d, 0755) != 0)
      return errno_message("mkdir", root + "/" + d, errno);
  if (int err = attach_scratch("dev", 0, AT_FDCWD, dev.c_str()); err != 0)
    return errno_message("mount tmpfs", dev, err);
  TRY(do_mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC,
               "newinstance,ptmxmode=0666,mode=0620"));
  if (int err = attach_scratch("shm", MOUNT_ATTR_NODEV, AT_FDCWD, (dev + "/shm").c_str());
      err != 0)
    return errno_message("mount tmpfs", dev + "/shm", err);
  return {};
}

namespace {

// The sandbox's own boot id, new at every boot (create, and the boot again
// after a pause without memory), as a VM's: the host's would tell agents
// of different sandboxes that they share a machine, and could not change
// across a boot again. A file of the scratch tmpfs, read-only, bound over
// /proc/sys/kernel/random/boot_id before /proc/sys turns read-only.
std::string setup_boot_id(const std::string& target) {
  if (::access(target.c_str(), F_OK) != 0)
    return {};
  unsigned char b[16];
  if (::getrandom(b, sizeof b, 0) != ssize_t(sizeof b))
    return errno_message("getrandom", "boot_id", errno);
  b[6] = (b[6] & 0x0f) | 0x40; // version 4
  b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
  char text[40];
  std::snprintf(text, sizeof text,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  int fd = ::openat(scratch_fd, "boot_id", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0)
    return errno_message("create", "scratch boot_id", errno);
  bool ok = ::write(fd, text, 37) == 37;
  int err = errno;
  ::close(fd);
  if (!ok)
    return errno_message("write", "scratch boot_id", err);
  if (int e = attach_scratch("boot_id", mask_attrs, AT_FDCWD, target.c_str()); e != 0)
    return errno_message("mount boot_id on", target, e);
  return {};
}

} // namespace

// Paths of /proc an agent must not read (kernel memory, timers that leak
// addresses) or write (sysrq, sysctls: uid 0 without capabilities can still
// write many sysctls, so /proc/sys must be read-only).
std::string setup_proc(const std::string& root) {
  auto proc = root + "/proc";
  TRY(make_dir(proc, 0555));
  TRY(do_mount("proc", proc, "proc", nosuid_nodev_noexec, nullptr));
  // kpage*: physical page flags and counts (uid 0 may read them without
  // any capability; a Rowhammer and page-reuse aid).
  static const char* masked_files[] = {
    "kcore",    "keys",       "latency_stats", "timer_list",  "timer_stats", "sched_debug",
    "kmsg",     "kallsyms",   "kpagecount",    "kpageflags",  "kpagecgroup"};
  auto null = root + "/dev/null";
  for (auto f : masked_files) {
    auto p = proc + "/" + f;
    if (::access(p.c_str(), F_OK) == 0)
      TRY(do_mount(null.c_str(), p, nullptr, MS_BIND, nullptr));
  }
  static const char* masked_dirs[] = {"acpi", "scsi", "asound"};
  for (auto d : masked_dirs) {
    auto p = proc + "/" + d;
    if (::access(p.c_str(), F_OK) == 0)
      TRY(mask_dir(p));
  }
  TRY(setup_boot_id(proc + "/sys/kernel/random/boot_id"));
  static const char* readonly[] = {"sys", "sysrq-trigger", "bus", "fs", "irq"};
  for (auto r : readonly) {
    auto p = proc + "/" + r;
    if (::access(p.c_str(), F_OK) != 0)
      continue;
    TRY(do_mount(p.c_str(), p, nullptr, MS_BIND | MS_REC, nullptr));
    TRY(do_mount(nullptr, p, nullptr,
                 MS_BIND | MS_REMOUNT | MS_RDONLY | nosuid_nodev_noexec, nullptr));
  }
  return {};
}

// Read-only sysfs with runc's masked directories: firmware tables (ACPI,
// DMI, EFI variables) and powercap (RAPL energy counters, a power side
// channel readable by uid 0). Shared: a recursive clone of the node's sysfs
// tree (those masks already on it), one superblock for every sandbox
// without network (launch_template.cpp says why).
bool sysfs_tree_open = false; ///< init_proto::sysfs_tree_fd, until setup_sys

std::string setup_sys(const std::string& root, bool shared) {
  auto sys = root + "/sys";
  TRY(make_dir(sys, 0555));
  if (shared) {
    int fd = init_proto::sysfs_tree_fd;
    int tree = ::open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    int err = errno;
    ::close(fd);
    sysfs_tree_open = false;
    if (tree < 0)
      return errno_message("clone shared sysfs onto", sys, err);
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    int rc = ::mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr);
    if (rc == 0)
      rc = ::move_mount(tree, "", AT_FDCWD, sys.c_str(), MOVE_MOUNT_F_EMPTY_PATH);
    err = errno;
    ::close(tree);
    return rc == 0 ? std::string{} : errno_message("mount shared sysfs", sys, err);
  }
  TRY(do_mount("sysfs", sys, "sysfs", MS_RDONLY | nosuid_nodev_noexec, nullptr));
  static const char* masked_dirs[] = {"firmware", "devices/virtual/powercap"};
  for (auto d : masked_dirs) {
    auto p = sys + "/" + d;
    if (::access(p.c_str(), F_OK) == 0)
      TRY(mask_dir(p));
  }
  return {};
}

namespace {

/// Opens `path` inside `root` as an O_PATH fd, resolving every component
/// (symlinks included) as if `root` were "/": a layer's symlink cannot lead a
/// protection mount outside the sandbox.
int open_in_root(int root, const std::string& path, std::string& err) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
  if (fd < 0)
    err = errno_message("protect", path, errno);
  return fd;
}

/// Clones the mount tree at `src` (recursively), makes the clone read-only,
/// nosuid, nodev and moves it onto the O_PATH fd `target`. 0 or errno.
int attach_readonly(int src_dfd, const char* src_path, unsigned src_flags, int target) {
  int tree = ::open_tree(src_dfd, src_path,
                         OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | src_flags);
  if (tree < 0)
    return errno;
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  int err = 0;
  if (::mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0
      || ::move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
    err = errno;
  ::close(tree);
  return err;
}

/// Covers `path` with an empty read-only mount: a size-0 tmpfs on a
/// directory, /dev/null on anything else.
std::string hide(int root, const std::string& path) {
  std::string err;
  int fd = open_in_root(root, path, err);
  if (fd < 0)
    return err;
  struct stat st {};
  std::string e;
  if (::fstat(fd, &st) != 0)
    e = errno_message("mount protection (stat)", path, errno);
  else if (S_ISDIR(st.st_mode)) {
    if (int err = attach_scratch("hidden", mask_attrs, fd, nullptr); err != 0)
      e = errno_message("mount protection (hidden)", path, err);
  } else if (int err = attach_readonly(AT_FDCWD, "/dev/null", 0, fd); err != 0) {
    e = errno_message("mount protection (hidden)", path, err);
  }
  ::close(fd);
  return e;
}

/// Makes `path` and everything mounted below it read-only: a recursive clone
/// of the tree, set read-only with mount_setattr, moved over the original.
/// Without CAP_SYS_ADMIN (and with mount calls filtered) nothing inside can
/// undo it, root included.
std::string make_readonly(int root, const std::string& path) {
  std::string err;
  int fd = open_in_root(root, path, err);
  if (fd < 0)
    return err;
  std::string e;
  if (int err = attach_readonly(fd, "", AT_EMPTY_PATH, fd); err != 0)
    e = errno_message("mount protection (read-only)", path, err);
  ::close(fd);
  return e;
}

} // namespace

/// Hidden paths first, so a read-only tree above them keeps them hidden.
std::string setup_protect(const std::string& rootfs, const std::vector<std::string>& readonly,
                          const std::vector<std::string>& hidden) {
  if (readonly.empty() && hidden.empty())
    return {};
  int root = ::open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    return errno_message("open", rootfs, errno);
  std::string e;
  for (auto& p : hidden)
    if (e.empty())
      e = hide(root, p);
  for (auto& p : readonly)
    if (e.empty())
      e = make_readonly(root, p);
  ::close(root);
  return e;
}

} // namespace dsec::init
