// Guest mode of dsec-init: the PID 1 of a microvm or vm sandbox, started by
// the guest kernel from our tiny initramfs (init + a few .ko files). It
// builds the sandbox root from the layers and then lets the ordinary
// container init run in it, so a VM sandbox speaks exactly the same protocol:
//
//   1. /dev (devtmpfs), /proc, /sys; the modules in /modules loaded with
//      finit_module in dependency order (parameters "mod.key=val" taken from
//      the kernel command line, as modprobe would);
//   2. the layer disks (virtio-blk, serial "dsec-l<i>", bottom first) mounted
//      read-only as EROFS, the upper disk (serial "dsec-upper", ext4 of
//      dsec.disk_mb, formatted by the node) at /sysroot/rw, overlay at
//      /sysroot/newroot: the sandbox's writes go to a host disk image whose
//      size is its disk limit, not to guest RAM; /sysroot moved onto / and chrooted into, because
//      pivot_root refuses the initramfs itself;
//   3. a listening unix socket as fd 3, connected to by this process; fork:
//      the child returns into init's main(), accepts, reads `config`
//      (rootfs "/newroot") and sets up and drops privileges as in a container;
//   4. this process (still PID 1, privileged, outside the seccomp filter)
//      relays bytes between the "dsec.ctl" virtio-serial port and that
//      socket, serves the "dsec.files" port (guest_proto.hpp), and reaps
//      orphans. If the agent dies, it powers the VM off, so the node sees
//      QEMU exit.
//
// Static, no exceptions: errors end in a message on the console and power
// off; the node notices the missing `ready` and reports the console log.
#include "backends/init/guest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/channel/guest_proto.hpp"
#include "backends/channel/protocol.hpp"

namespace dsec::init {

namespace {

namespace proto = init_proto;
namespace gp = guest_proto;

// Load order: every module after the ones it depends on.
const char* const modules[] = {
  "crc32c_generic", "libcrc32c",   "crc16",  "mbcache", "jbd2",   "ext4",
  "erofs",          "overlay",     "virtio_ring",
  "virtio",         "virtio_mmio", "virtio_pci_modern_dev",
  "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk", "virtio_console",
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dsec-guest: %s: %s\n", what.c_str(), std::strerror(errno));
  std::fflush(stderr);
  ::sync();
  ::reboot(RB_POWER_OFF);
  for (;;)
    ::pause();
}

std::string read_small(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0)
    out.append(buf, size_t(n));
  ::close(fd);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

std::vector<std::string> cmdline_words() {
  std::vector<std::string> words;
  std::string cl = read_small("/proc/cmdline"), w;
  for (char c : cl + " ") {
    if (c == ' ' || c == '\n') {
      if (!w.empty())
        words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return words;
}

std::string param(const std::vector<std::string>& words, const std::string& key) {
  for (auto& w : words)
    if (w.rfind(key + "=", 0) == 0)
      return w.substr(key.size() + 1);
  return {};
}

void load_modules(const std::vector<std::string>& words) {
  for (const char* m : modules) {
    std::string path = std::string("/modules/") + m + ".ko", args;
    for (auto& w : words)
      if (w.rfind(std::string(m) + ".", 0) == 0)
        args += (args.empty() ? "" : " ") + w.substr(std::strlen(m) + 1);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue; // not shipped for this machine type
    if (::syscall(SYS_finit_module, fd, args.c_str(), 0) != 0 && errno != EEXIST)
      die("finit_module " + path);
    ::close(fd);
  }
}

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  ::nanosleep(&ts, nullptr);
}

// /dev/<name> of the virtio-serial port called `name`, waiting for it.
std::string find_port(const char* name) {
  for (int tries = 0; tries < 500; ++tries) {
    if (DIR* d = ::opendir("/sys/class/virtio-ports")) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.')
          continue;
        std::string dev = e->d_name;
        if (read_small("/sys/class/virtio-ports/" + dev + "/name") == name) {
          ::closedir(d);
          return "/dev/" + dev;
        }
      }
      ::closedir(d);
    }
    sleep_ms(10);
  }
  errno = ENOENT;
  die(std::string("virtio-serial port ") + name);
}

// /dev/vdX whose serial is `serial`, waiting for it (`what` names it).
std::string find_disk(const std::string& serial, const char* what = "layer disk") {
  for (int tries = 0; tries < 500; ++tries) {
    if (DIR* d = ::opendir("/sys/block")) {
      while (dirent* e = ::readdir(d)) {
        std::string dev = e->d_name;
        if (dev.rfind("vd", 0) == 0 && read_small("/sys/block/" + dev + "/serial") == serial &&
            ::access(("/dev/" + dev).c_str(), F_OK) == 0) {
          ::closedir(d);
          return "/dev/" + dev;
        }
      }
      ::closedir(d);
    }
    sleep_ms(10);
  }
  errno = ENOENT;
  die(std::string(what) + " " + serial);
}

void must_mount(const char* src, const std::string& dst, const char* type, unsigned long flags,
                const std::string& data) {
  ::mkdir(dst.c_str(), 0755);
  if (::mount(src, dst.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0)
    die(std::string("mount ") + (type ? type : "") + " " + src + " on " + dst);
}

// Layers and overlay below /sysroot, then /sysroot becomes "/".
void build_root(const std::vector<std::string>& words) {
  int layers = std::atoi(param(words, "dsec.layers").c_str());
  if (layers <= 0) {
    errno = EINVAL;
    die("kernel command line: dsec.layers missing");
  }
  // Mount points only; the sandbox's files go to the upper disk.
  must_mount("tmpfs", "/sysroot", "tmpfs", 0, "mode=755,size=1m");
  std::string lower;
  for (int i = 0; i < layers; ++i) {
    auto dir = "/sysroot/l" + std::to_string(i);
    auto dev = find_disk("dsec-l" + std::to_string(i));
    must_mount(dev.c_str(), dir, "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, "");
    lower = "/l" + std::to_string(i) + (lower.empty() ? "" : ":") + lower; // top first
  }
  // noinit_itable: the node's image is sparse (reads as zeros), no inode
  // table needs zeroing in the background.
  must_mount(find_disk("dsec-upper", "upper disk").c_str(), "/sysroot/rw", "ext4", 0,
             "noinit_itable");
  ::mkdir("/sysroot/rw/upper", 0755);
  ::mkdir("/sysroot/rw/work", 0755);
  // Paths relative to /sysroot's future place as "/": mount it with the
  // absolute paths of now, which stay valid after the move.
  std::string opts = "lowerdir=";
  for (int i = layers - 1; i >= 0; --i)
    opts += "/sysroot/l" + std::to_string(i) + (i ? ":" : "");
  opts += ",upperdir=/sysroot/rw/upper,workdir=/sysroot/rw/work";
  must_mount("overlay", "/sysroot/newroot", "overlay", 0, opts);
  if (::chdir("/sysroot") != 0)
    die("chdir /sysroot");
  if (::mount(".", "/", nullptr, MS_MOVE, nullptr) != 0)
    die("move /sysroot to /");
  if (::chroot(".") != 0 || ::chdir("/") != 0)
    die("chroot /sysroot");
}

// -- files port ----------------------------------------------------------------

int open_in(int root, const std::string& rel, int flags, mode_t mode) {
  open_how how{};
  how.flags = uint64_t(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  for (;;) {
    long fd = ::syscall(SYS_openat2, root, rel.empty() ? "." : rel.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN)
      return int(fd);
  }
}

std::string err_frame(uint32_t id, gp::err_kind k, int e, const std::string& what,
                      uint64_t size = 0) {
  return proto::writer(gp::file_err, id).u8(uint8_t(k)).u32(uint32_t(e)).str(what).u64(size)
    .finish();
}

// The node checked the path: absolute, no "..", no NUL, not the root.
std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> parts;
  std::string c;
  for (char ch : path + "/") {
    if (ch == '/') {
      if (!c.empty() && c != ".")
        parts.push_back(c);
      c.clear();
    } else {
      c += ch;
    }
  }
  return parts;
}

std::string do_put(uint32_t id, const std::string& path, uint32_t mode, const std::string& data) {
  int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  auto parts = components(path);
  std::string rel, result;
  int dir = ::fcntl(root, F_DUPFD_CLOEXEC, 0), fd = -1;
  for (size_t n = 0; n + 1 < parts.size() && result.empty(); ++n) {
    rel += (n ? "/" : "") + parts[n];
    int next = open_in(root, rel, O_PATH | O_DIRECTORY, 0);
    if (next < 0 && errno == ENOENT) {
      if (::mkdirat(dir, parts[n].c_str(), 0755) != 0 && errno != EEXIST)
        result = err_frame(id, gp::err_kind::sys, errno, "mkdir /" + rel);
      next = open_in(root, rel, O_PATH | O_DIRECTORY, 0);
    }
    if (next < 0 && result.empty())
      result = err_frame(id, gp::err_kind::sys, errno, "open /" + rel + " (parent of " + path + ")");
    ::close(dir);
    dir = next;
  }
  rel.clear();
  for (size_t n = 0; n < parts.size(); ++n)
    rel += (n ? "/" : "") + parts[n];
  struct stat st {};
  if (result.empty()) {
    fd = open_in(root, rel, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode & 07777);
    if (fd < 0 && errno == ENXIO)
      result = err_frame(id, gp::err_kind::not_regular, 0, "write " + path);
    else if (fd < 0)
      result = err_frame(id, gp::err_kind::sys, errno, "open " + path);
    else if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      result = err_frame(id, gp::err_kind::not_regular, 0, "write " + path);
    else if (::ftruncate(fd, 0) != 0)
      result = err_frame(id, gp::err_kind::sys, errno, "truncate " + path);
  }
  for (size_t off = 0; result.empty() && off < data.size();) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      result = err_frame(id, gp::err_kind::sys, errno, "write " + path);
    else
      off += size_t(n);
  }
  if (result.empty() && ::fchmod(fd, mode & 07777) != 0)
    result = err_frame(id, gp::err_kind::sys, errno, "chmod " + path);
  for (int f : {fd, dir, root})
    if (f >= 0)
      ::close(f);
  return result.empty() ? proto::writer(gp::file_ok, id).finish() : result;
}

std::string do_get(uint32_t id, const std::string& path, uint64_t max_bytes) {
  int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  std::string rel;
  for (auto& c : components(path))
    rel += (rel.empty() ? "" : "/") + c;
  int fd = open_in(root, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
  ::close(root);
  if (fd < 0)
    return err_frame(id, gp::err_kind::sys, errno, "open " + path);
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return err_frame(id, gp::err_kind::not_regular, 0, "read " + path);
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    return err_frame(id, gp::err_kind::too_large, 0, "read " + path, uint64_t(st.st_size));
  }
  out.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::read(fd, &out[got], out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return err_frame(id, gp::err_kind::sys, e, "read " + path);
    }
    if (n == 0)
      break;
    got += size_t(n);
  }
  ::close(fd);
  out.resize(got);
  return proto::writer(gp::file_data, id).str(out).finish();
}

// /dev/urandom, opened before the chroot (the new root has no /dev).
int random_fd = -1;

// A restored guest (template clone, resume): the host's clock and entropy.
// RNDADDENTROPY credits the seed, RNDRESEEDCRNG makes the kernel's CRNG
// (and every per-CPU one, lazily) use it now rather than within a minute.
std::string do_identity(uint32_t id, uint64_t now_ns, const std::string& seed,
                        const std::string& host) {
  // The agent shares PID 1's UTS namespace in a guest.
  if (!host.empty() && ::sethostname(host.data(), std::min<size_t>(host.size(), 64)) != 0)
    return err_frame(id, gp::err_kind::sys, errno, "sethostname " + host);
  timespec ts{time_t(now_ns / 1000000000ull), long(now_ns % 1000000000ull)};
  if (::clock_settime(CLOCK_REALTIME, &ts) != 0)
    return err_frame(id, gp::err_kind::sys, errno, "clock_settime");
  // struct rand_pool_info ends in a flexible array: lay it out by hand.
  alignas(rand_pool_info) unsigned char e[sizeof(rand_pool_info) + 256] = {};
  auto* info = reinterpret_cast<rand_pool_info*>(e);
  size_t n = std::min<size_t>(seed.size(), 256);
  info->entropy_count = int(n * 8);
  info->buf_size = int(n);
  std::memcpy(e + sizeof(rand_pool_info), seed.data(), n);
  if (random_fd < 0 || ::ioctl(random_fd, RNDADDENTROPY, e) != 0)
    return err_frame(id, gp::err_kind::sys, random_fd < 0 ? EBADF : errno, "RNDADDENTROPY");
  if (::ioctl(random_fd, RNDRESEEDCRNG) != 0 && errno != ENODATA)
    return err_frame(id, gp::err_kind::sys, errno, "RNDRESEEDCRNG");
  return proto::writer(gp::file_ok, id).finish();
}

std::string serve_file_frame(const proto::header& h, std::string_view body) {
  proto::reader r(body);
  if (h.type == gp::put) {
    auto path = r.str();
    auto mode = r.u32();
    auto data = r.str();
    if (r.done())
      return do_put(h.id, path, mode, data);
  } else if (h.type == gp::get) {
    auto path = r.str();
    auto max = r.u64();
    if (r.done())
      return do_get(h.id, path, max);
  } else if (h.type == gp::identity) {
    auto now = r.u64();
    auto seed = r.str();
    auto host = r.str();
    if (r.done())
      return do_identity(h.id, now, seed, host);
  }
  errno = EINVAL;
  return err_frame(h.id, gp::err_kind::sys, EINVAL, "file request: malformed frame");
}

// -- relay -----------------------------------------------------------------------

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    auto w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
      continue;
    }
    if (w <= 0)
      return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

[[noreturn]] void relay(int ctl_port, int files_port, int agent_sock, pid_t agent) {
  std::string fin;
  char buf[65536];
  for (;;) {
    pollfd fds[3] = {{ctl_port, POLLIN, 0}, {agent_sock, POLLIN, 0}, {files_port, POLLIN, 0}};
    ::poll(fds, 3, 1000);
    if (fds[0].revents & POLLIN) {
      auto n = ::read(ctl_port, buf, sizeof buf);
      if (n > 0)
        write_all(agent_sock, buf, size_t(n));
    } else if (fds[0].revents & POLLHUP) {
      sleep_ms(20); // host side not connected: nothing to read yet
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      auto n = ::read(agent_sock, buf, sizeof buf);
      if (n > 0)
        write_all(ctl_port, buf, size_t(n));
    }
    if (fds[2].revents & POLLIN) {
      auto n = ::read(files_port, buf, sizeof buf);
      if (n > 0)
        fin.append(buf, size_t(n));
      proto::header h;
      for (;;) {
        auto p = proto::peek_frame(fin, h);
        if (p == proto::parse::incomplete)
          break;
        if (p == proto::parse::invalid) {
          fin.clear();
          break;
        }
        auto reply = serve_file_frame(h, std::string_view(fin).substr(proto::header_size, h.length));
        fin.erase(0, proto::header_size + h.length);
        write_all(files_port, reply.data(), reply.size());
      }
    }
    for (;;) {
      int st = 0;
      pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid <= 0)
        break;
      if (pid == agent) {
        // Its last frames (a `failed` answer) still reach the node; the
        // console gets them too, for the node's error message.
        ::fcntl(agent_sock, F_SETFL, 0);
        ssize_t n;
        while ((n = ::read(agent_sock, buf, sizeof buf)) > 0) {
          write_all(ctl_port, buf, size_t(n));
          for (ssize_t i = 0; i < n; ++i)
            if (buf[i] < 0x20 || buf[i] > 0x7e)
              buf[i] = ' ';
          std::fprintf(stderr, "dsec-guest: agent said: %.*s\n", int(n), buf);
        }
        std::fprintf(stderr, "dsec-guest: the agent exited (status %d); powering off\n", st);
        sleep_ms(500);
        ::sync();
        ::reboot(RB_POWER_OFF);
      }
    }
  }
}

} // namespace

void guest_boot() {
  // A container's init gets its listening socket as fd 3; the guest's PID 1
  // starts from the kernel with nothing but the console.
  if (::getpid() != 1 || ::fcntl(3, F_GETFD) >= 0)
    return;
  ::mkdir("/dev", 0755);
  ::mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  if (::fcntl(2, F_GETFD) < 0) { // no /dev/console in the initramfs
    int c = ::open("/dev/console", O_RDWR);
    for (int fd = 0; fd < 3 && c >= 0; ++fd)
      if (fd != c)
        ::dup2(c, fd);
  }
  // fd 3 first (nothing else may take it): what init's main() accepts the
  // node's connection from.
  int lsn = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const char name[] = "\0dsec-guest-agent";
  std::memcpy(addr.sun_path, name, sizeof name - 1);
  auto len = socklen_t(offsetof(sockaddr_un, sun_path) + sizeof name - 1);
  if (lsn < 0 || ::bind(lsn, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(lsn, 4) != 0 || ::dup2(lsn, 3) != 3)
    die("agent socket");
  if (lsn != 3)
    ::close(lsn);
  must_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  must_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  auto words = cmdline_words();
  load_modules(words);
  auto ctl_path = find_port(gp::ctl_port);
  auto files_path = find_port(gp::files_port);
  int ctl = ::open(ctl_path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  int files = ::open(files_path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (ctl < 0 || files < 0)
    die("open virtio-serial ports");
  random_fd = ::open("/dev/urandom", O_RDWR | O_CLOEXEC);
  build_root(words);
  int me = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (me < 0 || (::connect(me, reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS))
    die("connect agent socket");
  pid_t agent = ::fork();
  if (agent < 0)
    die("fork agent");
  if (agent == 0) {
    ::close(me);
    ::close(ctl);
    ::close(files);
    ::close(random_fd);
    return; // init's main() goes on: bootstrap, setup in "/newroot", loop
  }
  ::close(3);
  relay(ctl, files, me, agent);
}

} // namespace dsec::init
