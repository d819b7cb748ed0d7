// QEMU command lines, process start and QMP (see qemu.hpp).
//
// microvm: virtio-mmio devices (the transport addresses reach the guest's
// virtio_mmio module through the kernel command line), the isa serial port
// for the console, no PCI, no firmware: QEMU loads the uncompressed vmlinux
// through its PVH note. q35: the same guest with virtio-pci devices and
// SeaBIOS; slower to boot (~5 s under TCG) but a full PC.
#include "backends/vm/qemu.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "sys/fs.hpp"

extern char** environ;

namespace dsec::backends {

std::vector<std::string> qemu_argv(const machine_spec& m, const std::string& incoming) {
  std::string fd3 = std::to_string(qemu_ctl_fd), fd4 = std::to_string(qemu_files_fd),
              fd5 = std::to_string(qemu_qmp_fd);
  std::vector<std::string> a = {m.qemu, "-nodefaults", "-no-user-config", "-nographic",
                                "-no-reboot", "-name", "dsec-guest"};
  if (m.microvm)
    a.insert(a.end(), {"-M", "microvm,x-option-roms=off", "-serial",
                       "file:" + m.console_log});
  else
    a.insert(a.end(), {"-M", "q35", "-vga", "none", "-serial", "file:" + m.console_log});
  if (m.kvm)
    a.insert(a.end(), {"-cpu", "host"});
  // TCG's translation cache defaults to 1 GiB of lazily touched memory; a
  // guest that mostly idles needs far less (measured: RSS overhead beyond
  // guest RAM shrinks accordingly, boot time unchanged).
  a.insert(a.end(), {"-accel", m.kvm ? "kvm" : "tcg,tb-size=32", "-m", std::to_string(m.mem_mb),
                     "-smp", std::to_string(m.cpus), "-kernel", m.kernel, "-initrd", m.initrd,
                     "-append", m.append});
  std::string bus = m.microvm ? "device" : "pci";
  a.insert(a.end(), {"-chardev", "socket,id=ctl,fd=" + fd3, "-chardev",
                     "socket,id=files,fd=" + fd4, "-device", "virtio-serial-" + bus,
                     "-device", "virtserialport,chardev=ctl,name=dsec.ctl", "-device",
                     "virtserialport,chardev=files,name=dsec.files"});
  for (size_t i = 0; i < m.disks.size(); ++i) {
    auto id = "l" + std::to_string(i);
    a.insert(a.end(), {"-drive", "file=" + m.disks[i] + ",if=none,id=" + id +
                                     ",format=raw,readonly=on,cache=none,aio=threads",
                       "-device", "virtio-blk-" + bus + ",drive=" + id + ",serial=dsec-" + id});
  }
  a.insert(a.end(), {"-chardev", "socket,id=qmp,fd=" + fd5, "-mon", "chardev=qmp,mode=control"});
  if (!incoming.empty())
    a.insert(a.end(), {"-incoming", "exec:cat " + incoming});
  return a;
}

expected<qemu_process> start_qemu(const std::vector<std::string>& argv, int ctl, int files,
                                  const std::string& log) {
  int qmp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qmp) != 0)
    return sys_error("socketpair", "qmp", errno);
  sys::unique_fd ours{qmp[0]}, theirs{qmp[1]};
  sys::unique_fd out{::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)};
  sys::unique_fd null{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  if (!out || !null)
    return sys_error("open", log, errno);
  // Everything the child needs, prepared before fork: the node is
  // multithreaded, so the child only makes async-signal-safe calls.
  std::vector<char*> args;
  for (auto& s : argv)
    args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  int src[5] = {ctl, files, theirs.get(), null.get(), out.get()};
  pid_t pid = ::fork();
  if (pid < 0)
    return sys_error("fork", "qemu", errno);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127);
    ::setsid();
    // Out of the way first: a source may sit on a target number.
    int high[5];
    for (int i = 0; i < 5; ++i)
      high[i] = ::fcntl(src[i], F_DUPFD, 64);
    for (int i = 0; i < 3; ++i)
      ::dup2(high[i], 3 + i);
    ::dup2(high[3], 0);
    ::dup2(high[4], 1);
    ::dup2(high[4], 2);
    ::syscall(SYS_close_range, 6, ~0U, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
      ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), environ);
    ::_exit(127);
  }
  qemu_process q;
  q.pid = pid;
  q.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!q.pidfd) {
    int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return sys_error("pidfd_open", "qemu", e);
  }
  q.qmp = std::move(ours);
  return q;
}

void stop_qemu(qemu_process& q) {
  if (!q.pidfd)
    return;
  ::syscall(SYS_pidfd_send_signal, q.pidfd.get(), SIGKILL, nullptr, 0);
  siginfo_t si{};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(q.pidfd.get()), &si,
                  WEXITED) != 0 && errno == EINTR) {
  }
  q.pidfd.reset();
  q.qmp.reset();
}

std::string log_tail(const std::string& path, size_t max) {
  auto text = sys::read_file(path);
  if (!text)
    return {};
  std::string t = text->size() > max ? text->substr(text->size() - max) : *text;
  for (auto& c : t)
    if (c == '\n' || c == '\r' || static_cast<unsigned char>(c) < 0x20)
      c = ' ';
  while (!t.empty() && t.back() == ' ')
    t.pop_back();
  return t;
}

expected<std::string> qmp_client::read_line(int timeout_ms) {
  for (;;) {
    auto nl = in_.find('\n');
    if (nl != std::string::npos) {
      auto line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      return line;
    }
    pollfd pfd{fd_, POLLIN, 0};
    int n = ::poll(&pfd, 1, timeout_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      return error{errc::timeout, "qmp: no answer within " + std::to_string(timeout_ms) + " ms"};
    char buf[4096];
    auto got = ::recv(fd_, buf, sizeof buf, 0);
    if (got <= 0)
      return unavailable("qmp: qemu closed the monitor");
    in_.append(buf, static_cast<size_t>(got));
  }
}

expected<std::string> qmp_client::command(const std::string& cmd, int timeout_ms) {
  if (!ready_) {
    auto greeting = read_line(timeout_ms);
    if (!greeting)
      return greeting;
    ready_ = true;
    if (auto r = command(R"({"execute":"qmp_capabilities"})", timeout_ms); !r)
      return r;
  }
  auto line = cmd + "\n";
  if (::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return sys_error("qmp: send", cmd, errno);
  for (;;) {
    auto reply = read_line(timeout_ms);
    if (!reply)
      return reply;
    if (reply->find("\"return\"") != std::string::npos)
      return reply;
    if (reply->find("\"error\"") != std::string::npos)
      return internal_error("qmp " + cmd + ": " + *reply);
    // an event: skip
  }
}

} // namespace dsec::backends
