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
#include <cstdlib>

#include "sys/fs.hpp"

extern char** environ;

namespace dsec::backends {

namespace {

// $DSEC_VM_TB_MB overrides the TCG code buffer size (MiB), for measuring.
int tcg_tb_mb() {
  if (const char* env = ::getenv("DSEC_VM_TB_MB"); env && std::atoi(env) > 0)
    return std::atoi(env);
  return 16;
}

} // namespace

std::vector<std::string> qemu_argv(const machine_spec& m, const std::string& incoming) {
  std::string fd3 = std::to_string(qemu_ctl_fd), fd4 = std::to_string(qemu_files_fd),
              fd5 = std::to_string(qemu_qmp_fd);
  std::vector<std::string> a = {m.qemu, "-nodefaults", "-no-user-config", "-nographic",
                                "-no-reboot", "-name", "dsec-guest"};
  auto mem = std::to_string(m.mem_mb);
  auto machine = std::string(m.microvm ? "microvm,x-option-roms=off" : "q35") + ",memory-backend=mem";
  a.insert(a.end(), {"-M", machine, "-serial", "file:" + m.console_log});
  if (!m.microvm)
    a.insert(a.end(), {"-vga", "none"});
  if (m.mem_path.empty())
    a.insert(a.end(), {"-object", "memory-backend-ram,id=mem,size=" + mem + "M"});
  else
    a.insert(a.end(), {"-object", "memory-backend-file,id=mem,size=" + mem + "M,mem-path=" +
                                      m.mem_path + ",share=" + (m.mem_shared ? "on" : "off")});
  if (m.kvm)
    a.insert(a.end(), {"-cpu", "host"});
  // TCG's translation cache defaults to 1 GiB of lazily touched memory; a
  // guest that mostly idles needs far less. 16 MiB: boot time unchanged,
  // and a restored guest only fills what it runs after the restore
  // (measured, bench/results/vm-2026-11-30-templates.json).
  a.insert(a.end(), {"-accel", m.kvm ? "kvm" : "tcg,tb-size=" + std::to_string(tcg_tb_mb()), "-m",
                     mem, "-smp", std::to_string(m.cpus)});
  if (!m.restored)
    a.insert(a.end(), {"-kernel", m.kernel, "-initrd", m.initrd, "-append", m.append});
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
  // The upper: QEMU writes through to the host page cache (raw, no cache
  // of its own) and does not flush on the guest's request (scratch space;
  // a stopped or ended QEMU has written everything, which templates and
  // pause rely on); a block the guest discards is a hole again.
  if (!m.upper.empty())
    a.insert(a.end(), {"-drive", "file=" + m.upper + ",if=none,id=upper,format=raw,"
                                 "cache=unsafe,aio=threads,discard=unmap",
                       "-device", "virtio-blk-" + bus + ",drive=upper,serial=dsec-upper"});
  a.insert(a.end(), {"-chardev", "socket,id=qmp,fd=" + fd5, "-mon", "chardev=qmp,mode=control"});
  if (incoming == "defer")
    a.insert(a.end(), {"-incoming", "defer"});
  else if (!incoming.empty())
    a.insert(a.end(), {"-incoming", "exec:cat " + incoming});
  return a;
}

expected<qemu_process> start_qemu(const std::vector<std::string>& argv, int ctl, int files,
                                  const std::string& log, bool thp) {
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
  // QEMU's own memory: glibc gives each thread an arena (64 MiB reserved,
  // a few touched); one is plenty. Transparent huge pages (QEMU asks for
  // them on guest RAM and the TCG buffer) stay where `thp` says: without
  // them loading a paused guest's RAM takes 3x longer (measured). A
  // template clone's RAM is a file (no THP either way) and its TCG buffer
  // then grows 4 KiB at a time instead of 2 MiB (-4 MiB per clone, as fast;
  // bench/results/vm-2026-11-30-templates.json). $DSEC_VM_QEMU_THP=0/1
  // turns them off/on for every QEMU.
  std::vector<std::string> env_own;
  for (char** e = environ; *e; ++e)
    if (std::string_view(*e).rfind("MALLOC_", 0) != 0)
      env_own.emplace_back(*e);
  // One arena; freed memory goes back to the system (a fixed mmap
  // threshold stops glibc from raising it after large frees).
  env_own.insert(env_own.end(), {"MALLOC_ARENA_MAX=1", "MALLOC_MMAP_THRESHOLD_=131072",
                                 "MALLOC_TRIM_THRESHOLD_=131072"});
  std::vector<char*> envp;
  for (auto& s : env_own)
    envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  const char* thp_env = ::getenv("DSEC_VM_QEMU_THP");
  bool no_thp = thp_env && *thp_env ? std::string_view(thp_env) == "0" : !thp;
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
    if (no_thp)
      ::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
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
    ::execve(args[0], args.data(), envp.data());
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
