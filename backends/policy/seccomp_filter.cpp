// Builds the sandbox seccomp filter with libseccomp and exports it as BPF
// (see seccomp_filter.hpp). The rule set is the sandbox's syscall policy:
// changing it changes what every agent may do.
#include "backends/policy/seccomp_filter.hpp"

#include <sched.h>
#include <seccomp.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "sys/fd.hpp"

namespace dsec::backends {

namespace {

struct rule {
  const char* name;
  int err;
};

// Syscalls an agent never needs and that widen the kernel surface or escape
// the sandbox. ENOSYS for clone3 so glibc falls back to clone, whose flags a
// classic filter can inspect.
constexpr rule denied[] = {
  {"mount", EPERM}, {"umount2", EPERM}, {"pivot_root", EPERM}, {"ptrace", EPERM},
  {"bpf", EPERM}, {"kexec_load", EPERM}, {"kexec_file_load", EPERM},
  {"keyctl", EPERM}, {"add_key", EPERM}, {"request_key", EPERM},
  {"unshare", EPERM}, {"setns", EPERM}, {"clone3", ENOSYS},
  {"perf_event_open", EPERM}, {"userfaultfd", EPERM}, {"io_uring_setup", EPERM},
  {"io_uring_enter", EPERM}, {"io_uring_register", EPERM},
  {"open_by_handle_at", EPERM}, {"name_to_handle_at", EPERM},
  {"init_module", EPERM}, {"finit_module", EPERM}, {"delete_module", EPERM},
  {"swapon", EPERM}, {"swapoff", EPERM}, {"reboot", EPERM}, {"acct", EPERM},
  {"quotactl", EPERM}, {"fsopen", EPERM}, {"fsconfig", EPERM}, {"fsmount", EPERM},
  {"fspick", EPERM}, {"move_mount", EPERM}, {"open_tree", EPERM},
  {"mount_setattr", EPERM}, {"settimeofday", EPERM}, {"clock_settime", EPERM},
  {"clock_adjtime", EPERM}, {"adjtimex", EPERM}, {"lookup_dcookie", EPERM},
  // Reading or writing another process's memory or stealing its descriptors
  // is ptrace by other means: init is not dumpable, but agent processes are
  // and share one uid.
  {"process_vm_readv", EPERM}, {"process_vm_writev", EPERM}, {"pidfd_getfd", EPERM},
  // The kernel log and I/O ports: host information and hardware access.
  {"syslog", EPERM}, {"iopl", EPERM}, {"ioperm", EPERM},
};

status add_rule(scmp_filter_ctx ctx, const char* what, int action, int nr,
                unsigned n_args, const scmp_arg_cmp* arg) {
  int rc = n_args ? seccomp_rule_add_array(ctx, action, nr, n_args, arg)
                  : seccomp_rule_add(ctx, action, nr, 0);
  if (rc != 0)
    return sys_error("seccomp_rule_add", what, -rc);
  return {};
}

status add_rules(scmp_filter_ctx ctx) {
  for (auto& r : denied) {
    int nr = seccomp_syscall_resolve_name(r.name);
    if (nr == __NR_SCMP_ERROR)
      return internal_error(std::string("seccomp resolve ") + r.name + ": unknown syscall");
    if (auto st = add_rule(ctx, r.name, SCMP_ACT_ERRNO(r.err), nr, 0, nullptr); !st)
      return st;
  }
  // clone with any namespace flag; CLONE_NEWTIME (0x80) is left out: in
  // clone's flags that bit belongs to the exit signal.
  const uint64_t ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID, CLONE_NEWNET,
                               CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP};
  for (auto f : ns_flags) {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, f, f);
    if (auto st = add_rule(ctx, "clone", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, &cmp); !st)
      return st;
  }
  // The kernel reads ioctl's request as 32 bits: compare only those, so a
  // request with high bits set cannot slip past. Besides terminal injection:
  // the ioctls that clone, dedupe or swap extents between files, which get
  // around file access checks (DSec saw XFS_IOC_SWAPEXT used that way).
  constexpr uint64_t xfs_ioc_swapext = 0xc0c0586d; // _IOWR('X', 109, struct xfs_swapext)
  const uint64_t ioctls[] = {TIOCSTI, TIOCLINUX, FICLONE, FICLONERANGE, FIDEDUPERANGE,
                             xfs_ioc_swapext};
  for (auto req : ioctls) {
    scmp_arg_cmp cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req);
    if (auto st = add_rule(ctx, "ioctl", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1, &cmp); !st)
      return st;
  }
  return {};
}

// libseccomp 2.5 exports only to a descriptor: a memfd, read back whole.
expected<std::string> export_program(scmp_filter_ctx ctx) {
  sys::unique_fd mem{::memfd_create("dsec-seccomp", MFD_CLOEXEC)};
  if (!mem)
    return sys_error("memfd_create", "dsec-seccomp", errno);
  if (int rc = seccomp_export_bpf(ctx, mem.get()); rc != 0)
    return sys_error("seccomp_export_bpf", "sandbox filter", -rc);
  struct stat st;
  if (::fstat(mem.get(), &st) != 0)
    return sys_error("stat", "dsec-seccomp memfd", errno);
  std::string prog(static_cast<size_t>(st.st_size), '\0');
  if (::pread(mem.get(), prog.data(), prog.size(), 0) != st.st_size)
    return sys_error("read", "dsec-seccomp memfd", errno ? errno : EIO);
  return prog;
}

} // namespace

expected<std::string> build_seccomp_program() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    return internal_error("seccomp_init: failed");
  auto st = add_rules(ctx);
  auto prog = st ? export_program(ctx) : expected<std::string>(st.err());
  seccomp_release(ctx);
  return prog;
}

} // namespace dsec::backends
