// Host-side mechanisms of the container backend (see launch.hpp): sealed
// init image, overlay through the new mount API (no page-sized option
// string, so any number of layers), control socket bound through
// /proc/self/fd so long sandbox dirs fit in sun_path, and the vfork-style
// clone of init (which joins the sandbox cgroups before it execs).
//
// Where a sandbox's root is mounted. The overlay stays a DETACHED mount
// (fsmount without move_mount) in the node and is attached only by init,
// inside its own new mount namespace, after it made every mount there
// private (nothing propagates back). Why: with the root attached on the
// host, the host's mount table grew by one mount per sandbox, and every
// CLONE_NEWNS copies that whole table, so each create cost O(sandboxes) in
// time and kernel memory (measured: 305 creates/s at 400 idle sandboxes,
// 68/s at 3,200; 0.34 -> 1.19 MB of host memory per sandbox). Detached, the
// host table holds only the shared per-layer EROFS mounts and a create costs
// the same at any density. The node keeps a second detached clone of the
// same mount (open_tree) for file calls: it sees the plain merged tree as
// before (no sandbox /proc, /dev or protect mounts to cross) and lives in no
// namespace. Init holds a copy of that clone at a fixed fd, so a restarted
// node takes the view back with pidfd_getfd instead of a host path. The
// other options were weaker: passing the fd over the control socket
// (SCM_RIGHTS) needs a second round trip before setup; /proc/<init>/root
// after a restart gives the sandbox's own mount tree (its protect mounts
// would turn file calls on read-only paths into EXDEV).
#include "backends/container/launch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/sched.h>
#include <unistd.h>


#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/channel/protocol.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

expected<launch_image> seal_init_binary(const std::string& path) {
  sys::unique_fd src{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!src)
    return sys_error("open init binary", path, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  struct stat st;
  if (::fstat(src.get(), &st) != 0)
    return sys_error("stat", path, errno);
  launch_image img;
  img.memfd.reset(::memfd_create("dsec-init", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!img.memfd)
    return sys_error("memfd_create", "dsec-init", errno);
  for (off_t off = 0; off < st.st_size;) {
    auto n = ::sendfile(img.memfd.get(), src.get(), &off, static_cast<size_t>(st.st_size - off));
    if (n <= 0)
      return sys_error("copy init binary", path, n < 0 ? errno : EIO);
  }
  if (::fcntl(img.memfd.get(), F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return sys_error("seal", "dsec-init memfd", errno);
  img.devnull.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!img.devnull)
    return sys_error("open", "/dev/null", errno);
  return img;
}

expected<overlay_root> mount_overlay(const std::string& dir,
                                     const std::vector<std::string>& lower_dirs, bool existing) {
  auto upper = dir + "/upper", work = dir + "/work", root = dir + "/rootfs";
  if (existing && !sys::exists(upper))
    return not_found("boot " + dir + " again: its upper directory is gone");
  // A volatile overlay leaves work/work/incompat/volatile behind, and
  // overlayfs refuses to mount over it again (the upper may have missed
  // syncs in a host crash). The overlay was unmounted cleanly when its last
  // process ended (power_off), and its writes are in the host's page cache,
  // as any file's: the work directory, scratch space only, is made anew.
  if (existing)
    if (auto st = sys::remove_tree(work); !st)
      return st.err();
  for (auto* d : {&upper, &work, &root})
    if (::mkdir(d->c_str(), 0755) != 0 && !(existing && errno == EEXIST))
      return sys_error("mkdir", *d, errno);
  sys::unique_fd fs{::fsopen("overlay", FSOPEN_CLOEXEC)};
  if (!fs)
    return sys_error("fsopen", "overlay", errno);
  auto set = [&](const char* key, const std::string& value) -> status {
    if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0)
      return sys_error(std::string("overlay ") + key, value, errno,
                       errno == ENOENT ? errc::not_found : errc::internal);
    return {};
  };
  // Overlay lists the top layer first; lower_dirs is bottom first.
  for (auto it = lower_dirs.rbegin(); it != lower_dirs.rend(); ++it)
    if (auto st = set("lowerdir+", *it); !st)
      return st.err();
  if (auto st = set("upperdir", upper); !st)
    return st.err();
  if (auto st = set("workdir", work); !st)
    return st.err();
  // volatile: no syncs of the upper (umount would otherwise sync the whole
  // host filesystem, tens of ms under load); the upper never outlives a host
  // crash anyway, the sandbox dies with the host.
  if (::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "volatile", nullptr, 0) != 0)
    return sys_error("overlay volatile", root, errno);
  if (::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_error("mount overlay", root, errno);
  // nosuid, nodev: the agent owns the upper (a setuid-root file or a device
  // node from a layer must mean nothing, in the node's view of this mount
  // and in the sandbox, which inherits the flags through pivot_root).
  overlay_root r;
  r.mount.reset(::fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!r.mount)
    return sys_error("fsmount overlay", root, errno);
  // SAFETY: a clone of a detached mount we made is itself detached (its own
  // anonymous namespace); both die with their last descriptor.
  r.node_view.reset(::open_tree(r.mount.get(), "",
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!r.node_view)
    return sys_error("open_tree clone of overlay", root, errno);
  return r;
}

namespace {

// sun_path holds 108 bytes; /proc/self/fd/<n>/ctl.sock always fits.
expected<sockaddr_un> socket_address(const std::string& dir, sys::unique_fd& dirfd) {
  dirfd.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd)
    return sys_error("open", dir, errno, errno == ENOENT ? errc::not_found : errc::internal);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "/proc/self/fd/%d/ctl.sock", dirfd.get());
  return addr;
}

expected<sys::unique_fd> connect_to(const sockaddr_un& addr, const std::string& shown) {
  sys::unique_fd c{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (!c)
    return sys_error("socket", shown, errno);
  if (::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0)
    return sys_error("connect", shown, errno,
                     errno == ENOENT || errno == ECONNREFUSED ? errc::unavailable
                                                              : errc::internal);
  return c;
}

} // namespace

expected<control_socket> make_control_socket(const std::string& dir) {
  sys::unique_fd dirfd;
  auto addr = socket_address(dir, dirfd);
  if (!addr)
    return addr.err();
  auto shown = dir + "/ctl.sock";
  control_socket s;
  s.listener.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.listener)
    return sys_error("socket", shown, errno);
  if (::bind(s.listener.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0)
    return sys_error("bind", shown, errno);
  ::chmod(shown.c_str(), 0600);
  if (::listen(s.listener.get(), 4) != 0)
    return sys_error("listen", shown, errno);
  auto c = connect_to(*addr, shown);
  if (!c)
    return c.err();
  s.client = std::move(*c);
  return s;
}

expected<sys::unique_fd> connect_control_socket(const std::string& dir) {
  sys::unique_fd dirfd;
  auto addr = socket_address(dir, dirfd);
  if (!addr)
    return addr.err();
  return connect_to(*addr, dir + "/ctl.sock");
}

namespace {

struct child_args {
  int memfd, listener, devnull;
  int root_mount, root_view; ///< -1 when there is no overlay_root
  int sysfs;                 ///< -1: none (only with a root)
  const int* join;
  size_t n_join;
};

// Exit statuses of a child that failed before init ran.
constexpr int exit_join_failed = 125, exit_fds_failed = 126, exit_exec_failed = 127;

// SAFETY: runs in a CLONE_VM | CLONE_VFORK child of a multithreaded process,
// on its own small stack, with every signal blocked: raw system calls only,
// no allocation, no locks. Descriptors are first lifted above 3 so that the
// dup2 calls below cannot clobber each other.
int child_main(void* p) {
  auto* a = static_cast<child_args*>(p);
  // A session (and process group) of its own: a signal to the node's group
  // (`kill -9 -PGID`, Ctrl-C or Ctrl-\ in the node's terminal) must not
  // reach the sandbox, which outlives the node and is adopted by its restart.
  ::setsid();
  // "0" names the writer itself: the whole (one-task) process moves.
  for (size_t i = 0; i < a->n_join; ++i)
    if (::write(a->join[i], "0", 1) != 1)
      ::_exit(exit_join_failed);
  int memfd = ::fcntl(a->memfd, F_DUPFD_CLOEXEC, 10);
  int listener = ::fcntl(a->listener, F_DUPFD_CLOEXEC, 10);
  int devnull = ::fcntl(a->devnull, F_DUPFD_CLOEXEC, 10);
  if (memfd < 0 || listener < 0 || devnull < 0)
    ::_exit(exit_fds_failed);
  if (::dup2(devnull, 0) < 0 || ::dup2(devnull, 1) < 0 || ::dup2(devnull, 2) < 0 ||
      ::dup2(listener, 3) < 0)
    ::_exit(exit_fds_failed);
  // The root's two mounts at their fixed numbers (init marks them CLOEXEC
  // at once, so no agent process ever inherits them).
  bool sysfs = a->root_mount >= 0 && a->sysfs >= 0;
  if (a->root_mount >= 0) {
    int m = ::fcntl(a->root_mount, F_DUPFD_CLOEXEC, 10);
    int v = ::fcntl(a->root_view, F_DUPFD_CLOEXEC, 10);
    int s = sysfs ? ::fcntl(a->sysfs, F_DUPFD_CLOEXEC, 10) : 0;
    if (m < 0 || v < 0 || s < 0 || ::dup2(m, init_proto::root_mount_fd) < 0 ||
        ::dup2(v, init_proto::root_view_fd) < 0 ||
        (sysfs && ::dup2(s, init_proto::sysfs_tree_fd) < 0))
      ::_exit(exit_fds_failed);
  }
  // Everything else of the node closes at exec; the memfd too (the kernel
  // keeps the image mapped).
  unsigned first = sysfs                ? init_proto::sysfs_tree_fd + 1
                   : a->root_mount >= 0 ? init_proto::root_view_fd + 1
                                        : init_proto::root_mount_fd;
  ::syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC);
  static const char* const argv[] = {"dsec-init", nullptr};
  static const char* const envp[] = {nullptr};
  ::syscall(SYS_execveat, memfd, "", argv, envp, AT_EMPTY_PATH);
  ::_exit(exit_exec_failed);
}

const char* failed_step(int status) {
  switch (status) {
  case exit_join_failed: return "join cgroups";
  case exit_fds_failed: return "set up descriptors";
  case exit_exec_failed: return "exec";
  default: return "start";
  }
}

} // namespace

#if defined(__x86_64__)
// clone3 with the child on its own stack: the child starts at the
// instruction after the syscall with rsp at the stack's top, so glibc's
// syscall() (whose `ret` would pop from the empty new stack) cannot be used.
// The child calls fn(arg) from the registers clone3 preserves (r12, r13)
// and exits with its result; the parent gets the pid or -errno.
// SAFETY: fn must not return into anything (it execs or _exits; the exit
// below is the guard) and runs with CLONE_VM | CLONE_VFORK semantics.
long clone3_run(clone_args* ca, int (*fn)(void*), void* arg) {
  long ret;
  register void* r12 asm("r12") = reinterpret_cast<void*>(fn);
  register void* r13 asm("r13") = arg;
  asm volatile("syscall\n\t"
               "testq %%rax, %%rax\n\t"
               "jnz 1f\n\t"
               "xorl %%ebp, %%ebp\n\t"
               "movq %%r13, %%rdi\n\t"
               "callq *%%r12\n\t"
               "movl %%eax, %%edi\n\t"
               "movl $60, %%eax\n\t" // SYS_exit
               "syscall\n\t"
               "ud2\n\t"
               "1:\n\t"
               : "=a"(ret)
               : "0"(long{SYS_clone3}), "D"(ca), "S"(sizeof(*ca)), "r"(r12), "r"(r13)
               : "rcx", "r11", "memory");
  return ret;
}
#endif

expected<launched> launch_init(const launch_image& img, int listener,
                               const std::vector<int>& join, const overlay_root* root,
                               int sysfs) {
  // A directory in `join` is the cgroup v2 group init is born in
  // (CLONE_INTO_CGROUP); the rest are files the child writes itself into.
  int born_in = -1;
  std::vector<int> writes;
  for (int fd : join) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
      born_in = fd;
    else
      writes.push_back(fd);
  }
  // 64 KiB: child_main needs a few hundred bytes; the rest is headroom for
  // the libc clone trampoline and signal frames that cannot occur (blocked).
  constexpr size_t stack_size = 64 << 10;
  std::vector<char> stack(stack_size);
  child_args args{img.memfd.get(),
                  listener,
                  img.devnull.get(),
                  root ? root->mount.get() : -1,
                  root ? root->node_view.get() : -1,
                  sysfs,
                  writes.data(),
                  writes.size()};
  int pidfd = -1;
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  // SAFETY: CLONE_VM | CLONE_VFORK: the child borrows our memory until its
  // execveat; we are suspended until then, so `args` and the stack live.
  int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNS |
              CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | SIGCHLD;
  pid_t pid;
  int err = 0;
  if (born_in >= 0) {
#if defined(__x86_64__)
    clone_args ca{};
    ca.flags = static_cast<uint64_t>(flags & ~CSIGNAL) | CLONE_INTO_CGROUP;
    ca.pidfd = reinterpret_cast<uint64_t>(&pidfd);
    ca.exit_signal = SIGCHLD;
    // The top 16-byte aligned, as the ABI wants before the call in clone3_run.
    ca.stack = reinterpret_cast<uint64_t>(stack.data());
    ca.stack_size = stack.size() & ~size_t{15};
    ca.cgroup = static_cast<uint64_t>(born_in);
    long r = clone3_run(&ca, child_main, &args);
    pid = r < 0 ? -1 : static_cast<pid_t>(r);
    err = r < 0 ? static_cast<int>(-r) : 0;
#else
    pid = -1;
    err = ENOSYS;
#endif
  } else {
    pid = ::clone(child_main, stack.data() + stack.size(), flags, &args, &pidfd);
    err = errno;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0)
    return sys_error(born_in >= 0 ? "clone3 into its cgroup" : "clone", "dsec-init", err);
  launched l;
  l.pid = pid;
  l.pidfd.reset(pidfd);
  // A child that failed before execveat already exited (we waited for it)
  // with one of child_main's codes. Any other exit is init itself, which can
  // be that quick when its setup fails: the caller reads its error frame.
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
      si.si_pid == pid && si.si_code == CLD_EXITED &&
      (si.si_status == exit_join_failed || si.si_status == exit_fds_failed ||
       si.si_status == exit_exec_failed)) {
    kill_and_reap(l.pidfd.get());
    return internal_error(std::string(failed_step(si.si_status)) +
                          " dsec-init: child exited with status " +
                          std::to_string(si.si_status));
  }
  return l;
}

// -- init_launcher ------------------------------------------------------------

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL // linux/pidfd.h, 6.9
#endif

/// Descriptor numbers in the node's table, and the answer (init's pid and
/// its pidfd's number in the launcher's table).
struct init_launcher::job {
  int memfd, devnull, listener, root_mount, root_view;
  const std::vector<int>* join;
  bool shared_sysfs;
  status error;
  pid_t pid = -1;
  int their_pidfd = -1;
};

std::unique_ptr<init_launcher> init_launcher::start(bool mount_template, bool sysfs_template) {
  std::unique_ptr<init_launcher> l(new init_launcher);
  l->want_mount_template_ = mount_template;
  l->want_sysfs_template_ = sysfs_template;
  auto* self = l.get();
  pid_t tid = -1;
  l->thread_ = std::thread([self, &tid] {
    {
      std::lock_guard<std::mutex> g(self->m_);
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
    }
    ::pthread_setname_np(::pthread_self(), "dsec-launch");
    self->run();
  });
  std::unique_lock<std::mutex> g(l->m_);
  l->cv_.wait(g, [&] { return l->ready_; });
  // In the node's table (this thread's): the launcher's own table is
  // reached through it.
  if (l->thread_ok_)
    l->thread_pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, tid, PIDFD_THREAD)));
  bool ok = bool(l->thread_pidfd_);
  g.unlock();
  if (!ok)
    l.reset(); // stops and joins the thread
  return l;
}

init_launcher::~init_launcher() {
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void init_launcher::run() {
  // SAFETY: from here on this thread has a descriptor table of its own. It
  // closes its copies of the node's descriptors (the node's stay open) and
  // reaches the node's table through a pidfd of the process.
  int node = -1;
  if (::unshare(CLONE_FILES) == 0) {
    ::syscall(SYS_close_range, 3, ~0U, 0);
    node = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  }
  // Before the first launch, in this thread only (launch_template.cpp).
  auto tmpl = node >= 0 ? enter_launch_template(want_mount_template_, want_sysfs_template_)
                        : launch_template{};
  if (!tmpl.error.empty())
    std::fprintf(stderr, "dsec: launcher: %s%s\n", tmpl.error.c_str(),
                 tmpl.broken ? " (inits are launched from the node's threads)"
                             : " (that part is left out)");
  {
    std::lock_guard<std::mutex> g(m_);
    thread_ok_ = node >= 0 && !tmpl.broken;
    template_ = std::move(tmpl);
    ready_ = true;
  }
  cv_.notify_all();
  int last_pidfd = -1; // ours, kept until the caller took its copy
  std::unique_lock<std::mutex> g(m_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || job_; });
    if (stop_)
      break;
    if (last_pidfd >= 0)
      ::close(last_pidfd);
    last_pidfd = -1;
    auto* j = job_;
    int err = 0;
    auto take = [&](int fd) {
      if (fd < 0)
        return -1;
      int mine = static_cast<int>(::syscall(SYS_pidfd_getfd, node, fd, 0));
      if (mine < 0 && !err)
        err = errno;
      return mine;
    };
    launch_image img;
    img.memfd.reset(take(j->memfd));
    img.devnull.reset(take(j->devnull));
    sys::unique_fd listener{take(j->listener)};
    overlay_root root;
    root.mount.reset(take(j->root_mount));
    root.node_view.reset(take(j->root_view));
    std::vector<sys::unique_fd> held;
    std::vector<int> join;
    for (int fd : *j->join) {
      held.emplace_back(take(fd));
      join.push_back(held.back().get());
    }
    if (err) {
      j->error = sys_error("pidfd_getfd", "descriptors for dsec-init", err);
    } else {
      int sysfs = j->shared_sysfs && template_.sysfs ? template_.sysfs.get() : -1;
      auto r = launch_init(img, listener.get(), join, j->root_mount < 0 ? nullptr : &root, sysfs);
      if (r) {
        j->pid = r->pid;
        last_pidfd = j->their_pidfd = r->pidfd.release();
      } else {
        j->error = r.err();
      }
    }
    job_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
  if (last_pidfd >= 0)
    ::close(last_pidfd);
  if (node >= 0)
    ::close(node);
  // SAFETY: the template's descriptors are numbers in THIS thread's table;
  // closed here, never by ~init_launcher on another thread (where the same
  // numbers name the node's own descriptors).
  template_.sysfs.reset(); // (m_ is still held: g)
}

expected<launched> init_launcher::launch(const launch_image& img, int listener,
                                         const std::vector<int>& join,
                                         const overlay_root* root, bool shared_sysfs) {
  std::lock_guard<std::mutex> once(call_m_);
  job j{img.memfd.get(), img.devnull.get(), listener,
        root ? root->mount.get() : -1, root ? root->node_view.get() : -1, &join,
        shared_sysfs, {}};
  {
    std::unique_lock<std::mutex> g(m_);
    job_ = &j;
    done_ = false;
    cv_.notify_all();
    cv_.wait(g, [&] { return done_; });
  }
  if (!j.error)
    return j.error.err();
  // A copy of init's pidfd into the node's table (the launcher closes its
  // own at the next launch, while call_m_ keeps this one ours).
  launched out;
  out.pid = j.pid;
  out.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_getfd, thread_pidfd_.get(),
                                             j.their_pidfd, 0)));
  if (!out.pidfd) {
    int err = errno;
    // Without its pidfd the node cannot own this init. It is our child and
    // unreaped, so its pid still names it: kill and reap by pid.
    ::kill(out.pid, SIGKILL);
    siginfo_t si{};
    ::waitid(P_PID, static_cast<id_t>(out.pid), &si, WEXITED);
    return sys_error("pidfd_getfd", "pidfd of dsec-init", err);
  }
  return out;
}

void kill_and_reap(int pidfd) {
  ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  siginfo_t si{};
  // Not our child (recovered sandbox): ECHILD at once; wait on the pidfd.
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &si, WEXITED) != 0) {
    pollfd p{pidfd, POLLIN, 0};
    ::poll(&p, 1, 10000);
  }
}

} // namespace dsec::backends
