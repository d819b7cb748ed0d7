// Starting one exec's process inside the sandbox: a CLONE_VM | CLONE_VFORK
// child (no copy of init's page tables, no copy-on-write faults in init
// afterwards) that makes itself a session leader, restores default signal
// state, resets oom_score_adj, wires the pipes to 0/1/2, changes directory
// and execs with a PATH search over the command's own environment.
#include "backends/init/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dsec::init {

bool oom_protected = false;

namespace {

// execvpe() searches the PATH of init's own environment; this searches the
// PATH of the command's environment, with stack buffers only.
void exec_search(char** argv, char** envp) {
  const char* file = argv[0];
  if (std::strchr(file, '/')) {
    ::execve(file, argv, envp);
    return;
  }
  const char* path = "/usr/local/bin:/usr/bin:/bin";
  for (char** e = envp; *e; ++e)
    if (std::strncmp(*e, "PATH=", 5) == 0)
      path = *e + 5;
  bool denied = false;
  char buf[4096];
  for (const char* p = path;; ++p) {
    const char* colon = ::strchrnul(p, ':');
    size_t dl = size_t(colon - p), fl = std::strlen(file);
    if (dl + fl + 2 <= sizeof(buf)) {
      std::memcpy(buf, p, dl);
      size_t off = dl;
      if (dl)
        buf[off++] = '/';
      std::memcpy(buf + off, file, fl + 1);
      ::execve(buf, argv, envp);
      if (errno == EACCES)
        denied = true;
    }
    if (*colon == 0)
      break;
    p = colon;
  }
  if (denied)
    errno = EACCES;
}

// SAFETY: runs in a CLONE_VM | CLONE_VFORK child on its own stack while init
// waits: system calls only, no allocation. Signal dispositions are the
// child's own copy (no CLONE_SIGHAND); init changed only SIGPIPE.
int spawn_child(void* p) {
  auto* a = static_cast<spawn_args*>(p);
  ::setsid();
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (oom_protected) {
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)!::write(fd, "0", 1);
      ::close(fd);
    }
  }
  ::dup2(a->in, 0);
  ::dup2(a->out, 1);
  ::dup2(a->err, 2);
  if (a->ctty)
    ::ioctl(0, TIOCSCTTY, 0);
  // Raw system calls: glibc's set*id wrappers may signal other threads to
  // follow, which a CLONE_VM child must not do. Groups first, uid last (it
  // gives up the right to change the others).
  if (a->set_ids) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    caps[0].permitted = caps[0].effective = (1u << CAP_SETUID) | (1u << CAP_SETGID);
    if (::syscall(SYS_capset, &hdr, caps) != 0 || ::syscall(SYS_setgroups, a->ngroups, a->groups) != 0
        || ::syscall(SYS_setgid, a->gid) != 0 || ::syscall(SYS_setuid, a->uid) != 0) {
      dprintf(2, "dsec-init: become uid %u gid %u: %s\n", unsigned(a->uid), unsigned(a->gid),
              strerror(errno));
      ::_exit(126);
    }
  }
  if (::chdir(a->cwd) != 0) {
    dprintf(2, "dsec-init: chdir %s: %s\n", a->cwd, strerror(errno));
    ::_exit(127);
  }
  exec_search(a->argv, a->envp);
  int e = errno;
  dprintf(2, "dsec-init: exec %s: %s\n", a->argv[0], strerror(e));
  ::_exit(e == EACCES || e == ENOEXEC ? 126 : 127);
}

} // namespace

pid_t spawn(spawn_args& a) {
  // One stack is enough: init is single-threaded and waits for each child
  // to exec (CLONE_VFORK) before it can start the next.
  static char stack[64 << 10] alignas(16);
  return ::clone(spawn_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
}

} // namespace dsec::init
