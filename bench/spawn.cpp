// fork/exec for the peer runs, and the patched mount namespace for crun.
#include "bench/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dsec::bench {

namespace {

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(char* const* argv, int out_fd, int null_fd, int mntns_fd) {
  // SAFETY: this child is single-threaded (fork copies only the caller), so
  // setns(CLONE_NEWNS) is allowed; it changes only this child's mounts view.
  if (mntns_fd >= 0 && ::setns(mntns_fd, CLONE_NEWNS) != 0) {
    static const char msg[] = "bench: setns into patched mount namespace failed\n";
    (void)!::write(out_fd, msg, sizeof msg - 1);
    ::_exit(126);
  }
  ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  ::close_range(3, ~0U, 0);
  ::execv(argv[0], argv);
  static const char msg[] = "bench: exec failed\n";
  (void)!::write(2, msg, sizeof msg - 1);
  ::_exit(127);
}

expected<sys::unique_fd> open_output(output_mode mode, sys::unique_fd& write_end) {
  if (mode == output_mode::pipe) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
      return sys_error("pipe2", "for child output", errno);
    write_end.reset(p[1]);
    return sys::unique_fd{p[0]};
  }
  if (mode == output_mode::memfd) {
    int fd = ::memfd_create("bench-child-output", MFD_CLOEXEC);
    if (fd < 0)
      return sys_error("memfd_create", "for child output", errno);
    write_end.reset(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    return sys::unique_fd{fd};
  }
  write_end.reset(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  return sys::unique_fd{};
}

} // namespace

std::string find_exe(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    auto end = dirs.find(':', pos);
    auto dir = dirs.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    auto full = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0)
      return full;
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  return "";
}

expected<child_process> spawn(const std::vector<std::string>& argv, output_mode mode,
                              int mntns_fd) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/')
    return invalid_argument("spawn: argv[0] must be an absolute path");
  sys::unique_fd write_end;
  auto read_end = open_output(mode, write_end);
  if (!read_end)
    return read_end.err();
  sys::unique_fd null_fd{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  if (!write_end || !null_fd)
    return sys_error("open", "/dev/null", errno);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0)
    return sys_error("fork for", argv[0], errno);
  if (pid == 0)
    exec_child(args.data(), write_end.get(), null_fd.get(), mntns_fd);
  return child_process{pid, std::move(*read_end)};
}

int wait_child(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR)
      return 255;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    if (out.size() < (1u << 20))
      out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string read_memfd(int fd) {
  std::string out;
  char buf[4096];
  off_t off = 0;
  while (out.size() < (1u << 20)) {
    auto n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

expected<run_result> run(const std::vector<std::string>& argv, int mntns_fd) {
  auto child = spawn(argv, output_mode::memfd, mntns_fd);
  if (!child)
    return child.err();
  run_result r;
  r.exit_code = wait_child(child->pid);
  r.output = read_memfd(child->out.get());
  return r;
}

expected<sys::unique_fd> make_patched_mount_ns(const std::string& empty_file,
                                               const std::string& target) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return sys_error("pipe2", "for mount namespace helper", errno);
  sys::unique_fd rd{p[0]}, wr{p[1]};
  bool patch = ::access(target.c_str(), F_OK) == 0;
  pid_t pid = ::fork();
  if (pid < 0)
    return sys_error("fork", "mount namespace helper", errno);
  if (pid == 0) {
    // SAFETY: single-threaded child. / is made rprivate before the bind mount
    // so that the mount cannot propagate back into the host's namespace.
    int err = 0;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        (patch && ::mount(empty_file.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0))
      err = errno;
    (void)!::write(wr.get(), &err, sizeof err);
    ::pause();
    ::_exit(0);
  }
  wr.reset();
  int err = -1;
  auto n = ::read(rd.get(), &err, sizeof err);
  sys::unique_fd ns;
  if (n == sizeof err && err == 0)
    ns.reset(::open(("/proc/" + std::to_string(pid) + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  int open_err = errno;
  ::kill(pid, SIGKILL);
  wait_child(pid);
  if (n != sizeof err)
    return internal_error("make mount namespace: helper died before reporting");
  if (err != 0)
    return sys_error("make mount namespace: bind " + empty_file + " over", target, err);
  if (!ns)
    return sys_error("open", "/proc/" + std::to_string(pid) + "/ns/mnt", open_err);
  return ns;
}

} // namespace dsec::bench
