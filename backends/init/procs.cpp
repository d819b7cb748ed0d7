// Reading /proc for `ps` and checking `signal` requests (see procs.hpp).
// Stack buffers and small strings only: init is a small static binary.
#include "backends/init/procs.hpp"

#include <dirent.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dsec::init {

namespace {

/// Reads at most `cap` bytes of a /proc file; empty on any error.
std::string read_proc(const char* path, size_t cap) {
  std::string out;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return out;
  char buf[4096];
  while (out.size() < cap) {
    auto n = ::read(fd, buf, std::min(sizeof buf, cap - out.size()));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

/// Unix ms at which the clock behind /proc's starttime (CLOCK_BOOTTIME) was 0.
double boot_epoch_ms() {
  timespec rt, bt;
  ::clock_gettime(CLOCK_REALTIME, &rt);
  ::clock_gettime(CLOCK_BOOTTIME, &bt);
  return (double(rt.tv_sec) - double(bt.tv_sec)) * 1e3
         + (double(rt.tv_nsec) - double(bt.tv_nsec)) / 1e6;
}

/// Fills pid's entry from /proc/<pid>/stat and cmdline; false if it is gone
/// or a kernel thread.
bool read_entry(int pid, double boot_ms, long hz, init_proto::proc_entry& e) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  auto stat = read_proc(path, 4096);
  // "pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt
  // cmajflt utime stime cutime cstime priority nice threads itrealvalue
  // starttime ...": comm may hold spaces and parentheses, so parse from the
  // last ')'.
  auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size())
    return false;
  e.pid = pid;
  e.comm = stat.substr(open + 1, close - open - 1);
  const char* p = stat.c_str() + close + 2;
  e.state = uint8_t(*p);
  // Fields after the state (0-based): ppid 0, pgrp 1, session 2, tty 3,
  // tpgid 4, flags 5, ..., starttime 18 (stat fields 4, 9 and 22).
  unsigned long long fields[20] = {};
  for (int i = 0; i < 20 && *p; ++i) {
    p = std::strchr(p, ' ');
    if (!p)
      break;
    ++p;
    fields[i] = std::strtoull(p, nullptr, 10);
  }
  constexpr unsigned long long pf_kthread = 0x00200000;
  if (fields[5] & pf_kthread)
    return false;
  e.ppid = int32_t(fields[0]);
  e.start_ms = uint64_t(boot_ms + double(fields[18]) * 1e3 / double(hz));
  std::snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  auto cmd = read_proc(path, init_proto::max_ps_argv_bytes);
  for (size_t pos = 0; pos < cmd.size();) {
    auto nul = cmd.find('\0', pos);
    if (nul == std::string::npos)
      nul = cmd.size();
    e.argv.push_back(cmd.substr(pos, nul - pos));
    pos = nul + 1;
  }
  return true;
}

} // namespace

std::vector<init_proto::proc_entry> list_processes() {
  std::vector<int> pids;
  if (DIR* d = ::opendir("/proc")) {
    while (auto* ent = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(ent->d_name, &end, 10);
      if (pid > 0 && end && *end == 0)
        pids.push_back(int(pid));
    }
    ::closedir(d);
  }
  std::sort(pids.begin(), pids.end());
  double boot_ms = boot_epoch_ms();
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0)
    hz = 100;
  std::vector<init_proto::proc_entry> out;
  for (int pid : pids) {
    if (out.size() >= init_proto::max_ps_entries)
      break;
    init_proto::proc_entry e;
    if (read_entry(pid, boot_ms, hz, e))
      out.push_back(std::move(e));
  }
  return out;
}

int signal_process(const init_proto::signal_msg& m) {
  // The sandbox's init (and, in a guest, PID 1 that powers off when init
  // dies) must outlive whatever the agent asks for.
  if (m.pid <= 1 || m.pid == ::getpid())
    return EPERM;
  if (m.signo < 1 || m.signo > SIGRTMAX)
    return EINVAL;
  if (m.group && m.pid == ::getpgid(0))
    return EPERM;
  return kill_as_owner(m.pid, m.signo, m.group);
}

int kill_as_owner(pid_t pid, int signo, bool group) {
  pid_t target = group ? -pid : pid;
  if (::kill(target, signo) == 0)
    return 0;
  if (errno != EPERM)
    return errno;
  struct stat st;
  auto dir = "/proc/" + std::to_string(pid);
  if (::stat(dir.c_str(), &st) != 0)
    return errno == ENOENT ? ESRCH : errno;
  if (st.st_uid == ::geteuid())
    return EPERM;
  // SAFETY: init is single-threaded, so a plain fork is safe; the child only
  // makes system calls. It raises the CAP_SETUID init keeps permitted, becomes
  // the owner (real uid too: kill(2) matches the sender's real or effective
  // uid against the target's real or saved uid) and sends the signal.
  pid_t child = ::fork();
  if (child < 0)
    return errno;
  if (child == 0) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    caps[0].permitted = caps[0].effective = (1u << CAP_SETUID);
    if (::syscall(SYS_capset, &hdr, caps) != 0
        || ::syscall(SYS_setresuid, st.st_uid, st.st_uid, st.st_uid) != 0)
      ::_exit(EPERM);
    ::_exit(::kill(target, signo) == 0 ? 0 : errno);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR)
      return EPERM;
  return WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
}

uint64_t busy_cpu_ns() {
  int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  // "cpu  user nice system idle iowait irq softirq steal ..." in USER_HZ ticks.
  unsigned long long t[8] = {};
  if (std::sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &t[0], &t[1], &t[2],
                  &t[3], &t[4], &t[5], &t[6], &t[7]) < 4)
    return 0;
  unsigned long long busy = t[0] + t[1] + t[2] + t[5] + t[6] + t[7];
  long hz = ::sysconf(_SC_CLK_TCK);
  return static_cast<uint64_t>(busy) * (1000000000ULL / static_cast<uint64_t>(hz > 0 ? hz : 100));
}

} // namespace dsec::init
