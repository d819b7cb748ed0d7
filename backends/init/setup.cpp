// What dsec-init does to itself before it runs anything for the agent: the
// namespaces' setup (cgroup namespace, private mounts, the root attached
// from the node's detached mount, the filesystem view of fs_view.cpp,
// chroot or pivot_root), hostname, loopback, then the privilege drop
// (securebits, capabilities, no_new_privs, the seccomp program the node
// compiled). Runs single-threaded in a static binary, so no
// async-signal-safety concerns as in a forked node.
#include "backends/init/setup.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "backends/init/fs_view.hpp"

namespace dsec::init {

std::string errno_message(const char* op, const std::string& obj, int err) {
  std::string m = op;
  if (!obj.empty())
    m += " " + obj;
  const char* name = strerrorname_np(err);
  m += ": ";
  m += name ? name : "E?";
  m += " (";
  m += std::strerror(err);
  m += ")";
  return m;
}

namespace {

// SAFETY: the node handed us a detached overlay mount (fsmount, attached in
// no namespace) as root_mount_fd; attaching it here puts the sandbox's root
// in this namespace only, never in the host's (launch.cpp says why). The
// descriptor is closed after: the mount lives on in this namespace.
std::string attach_root(const std::string& rootfs) {
  int fd = init_proto::root_mount_fd;
  int rc = ::move_mount(fd, "", AT_FDCWD, rootfs.c_str(), MOVE_MOUNT_F_EMPTY_PATH);
  int err = errno;
  ::close(fd);
  return rc == 0 ? std::string{} : errno_message("move_mount root", rootfs, err);
}

// SAFETY: init was cloned from the node's launch template, a mount
// namespace that holds only an empty read-only tmpfs on "/" (no host mount).
// The root goes on top of it and init chroots into it: pivot_root would
// walk every task on the host under the host-wide mount lock
// (launch_template.cpp). Below the root lies only the empty template, and
// leaving a chroot takes chroot(2) again, i.e. CAP_SYS_CHROOT, which
// drop_privileges takes away (and new user namespaces, where it could be
// had, are refused by the seccomp filter).
std::string attach_root_on_template() {
  int fd = init_proto::root_mount_fd;
  std::string e;
  if (::move_mount(fd, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    e = errno_message("move_mount root", "/", errno);
  else if (::fchdir(fd) != 0)
    e = errno_message("chdir", "sandbox root", errno);
  else if (::chroot(".") != 0)
    e = errno_message("chroot", "sandbox root", errno);
  else if (::chdir("/") != 0)
    e = errno_message("chdir", "/", errno);
  ::close(fd);
  return e;
}

// SAFETY: pivot_root(".", ".") stacks the old root under the new one; the
// detach then drops every host mount from this namespace.
std::string enter_root(const std::string& root) {
  if (::chdir(root.c_str()) != 0)
    return errno_message("chdir", root, errno);
  if (::syscall(SYS_pivot_root, ".", ".") != 0)
    return errno_message("pivot_root", root, errno);
  if (::umount2(".", MNT_DETACH) != 0)
    return errno_message("umount old root", root, errno);
  if (::chdir("/") != 0)
    return errno_message("chdir", "/", errno);
  return {};
}

std::string loopback_up() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return errno_message("socket", "AF_INET", errno);
  struct ifreq ifr {};
  std::strcpy(ifr.ifr_name, "lo");
  int rc = ::ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    rc = ::ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  int err = errno;
  ::close(s);
  return rc == 0 ? std::string{} : errno_message("ifup", "lo", err);
}

} // namespace

std::string setup_namespaces(const init_proto::config_msg& cfg) {
  if (cfg.rootfs.empty() || cfg.rootfs[0] != '/')
    return "config: rootfs is not absolute";
  // After the node moved us into the sandbox cgroups: their dirs become "/".
  if (::unshare(CLONE_NEWCGROUP) != 0)
    return errno_message("unshare", "cgroup namespace", errno);
  // Private before anything is mounted: nothing below reaches the host.
  TRY(do_mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr));
  // In the template the sandbox root is "/" from here on (paths below are
  // root + "/dev" and so on, so root is "").
  bool chrooted = cfg.attach_root && cfg.in_template;
  sysfs_tree_open = cfg.attach_root && cfg.shared_sysfs;
  std::string root = chrooted ? std::string{} : cfg.rootfs;
  if (chrooted) {
    TRY(park_scratch_on_template());
    TRY(attach_root_on_template());
  }
  else if (cfg.attach_root)
    TRY(attach_root(cfg.rootfs));
  auto e = setup_dev(root);
  if (e.empty())
    e = setup_proc(root);
  if (e.empty())
    e = setup_sys(root, cfg.attach_root && cfg.shared_sysfs);
  if (e.empty())
    e = setup_protect(chrooted ? "/" : root, cfg.readonly, cfg.hidden);
  close_scratch();
  if (sysfs_tree_open) // setup failed before /sys
    ::close(init_proto::sysfs_tree_fd);
  sysfs_tree_open = false;
  if (!e.empty())
    return e;
  if (!chrooted)
    TRY(enter_root(cfg.rootfs));
  auto host = cfg.hostname.substr(0, 64);
  if (::sethostname(host.data(), host.size()) != 0)
    return errno_message("sethostname", host, errno);
  return loopback_up();
}

namespace {

std::string drop_capabilities() {
  // Root keeps uid 0; these bits stop execve from granting it capabilities
  // again, and lock that choice.
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
                                   SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                   SECBIT_NO_CAP_AMBIENT_RAISE |
                                   SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
    return errno_message("prctl", "PR_SET_SECUREBITS", errno);
  for (int cap = 0;; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL)
        break; // past the last capability this kernel knows
      return errno_message("prctl PR_CAPBSET_DROP", std::to_string(cap), errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return errno_message("prctl", "PR_CAP_AMBIENT_CLEAR_ALL", errno);
  // Init keeps CAP_SETUID and CAP_SETGID permitted, not effective nor
  // inheritable: an exec may ask to run as another user, and only the child
  // raises them (spawn.cpp) to set its ids just before exec. Nothing exec'd
  // gets them back: the bounding set is empty and SECBIT_NOROOT is locked,
  // so execve computes no capabilities for root or anyone else. A root
  // agent (no capabilities) cannot ptrace init while init holds them.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  data[0].permitted = (1u << CAP_SETUID) | (1u << CAP_SETGID);
  if (::syscall(SYS_capset, &hdr, data) != 0)
    return errno_message("capset", "all but setuid/setgid", errno);
  return {};
}

// SAFETY: `prog` comes from the node, which compiled it with libseccomp
// (backends/policy/seccomp_filter.cpp). Its shape is checked here and its
// instructions by the kernel; any failure refuses the sandbox, so init never
// runs the agent unfiltered. TSYNC: init is single-threaded, but the filter
// must cover every thread should that change.
std::string install_filter(const std::string& prog) {
  if (const char* why = init_proto::filter_shape_error(prog))
    return std::string("seccomp filter: ") + why;
  static_assert(sizeof(sock_filter) == init_proto::filter_insn_size);
  std::vector<sock_filter> insns(prog.size() / sizeof(sock_filter));
  std::memcpy(insns.data(), prog.data(), prog.size());
  sock_fprog fprog{static_cast<unsigned short>(insns.size()), insns.data()};
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog);
  if (rc > 0)
    return "seccomp SET_MODE_FILTER: thread " + std::to_string(rc) + " could not sync";
  if (rc != 0)
    return errno_message("seccomp SET_MODE_FILTER", "sandbox filter", errno);
  return {};
}

// Limits every process of the sandbox inherits from init. Without
// CAP_SYS_RESOURCE nothing inside can raise a hard limit again.
//  - open files: at most 65536 per process (the node's own limit may be far
//    higher): every open file takes a slot of the host-wide fs.file-max.
//    Lower if the node's hard limit is lower; the soft limit is kept.
//  - core dumps: none. The host's core_pattern may pipe to a helper that
//    runs on the host, as root, for every crash inside.
std::string set_limits() {
  constexpr rlim_t max_open_files = 65536;
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0)
    return errno_message("getrlimit", "RLIMIT_NOFILE", errno);
  nofile.rlim_max = std::min(nofile.rlim_max, max_open_files);
  nofile.rlim_cur = std::min(nofile.rlim_cur, nofile.rlim_max);
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0)
    return errno_message("setrlimit", "RLIMIT_NOFILE", errno);
  rlimit none{0, 0};
  if (::setrlimit(RLIMIT_CORE, &none) != 0)
    return errno_message("setrlimit", "RLIMIT_CORE", errno);
  return {};
}

} // namespace

std::string drop_privileges(const std::string& seccomp_bpf) {
  TRY(set_limits());
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return errno_message("prctl", "PR_SET_NO_NEW_PRIVS", errno);
  TRY(drop_capabilities());
  return install_filter(seccomp_bpf);
}

} // namespace dsec::init
