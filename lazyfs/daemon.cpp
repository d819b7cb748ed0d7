// Finding, starting and stopping the lazy blob daemon (see daemon.hpp).
#include "lazyfs/daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "lazyfs/stats.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::lazyfs {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr long fuse_super_magic = 0x65735546;

std::string lazy_dir(const std::string& store) { return store + "/lazy"; }
std::string lock_path(const std::string& store) { return lazy_dir(store) + "/daemon.lock"; }
std::string info_path(const std::string& store) { return lazy_dir(store) + "/daemon.json"; }
std::string users_path(const std::string& store) { return lazy_dir(store) + "/users.lock"; }

/// A shared hold on the store's users lock, for the caller's lifetime.
expected<std::shared_ptr<sys::unique_fd>> hold_users_lock(const std::string& store) {
  auto path = users_path(store);
  auto fd = std::make_shared<sys::unique_fd>(
    ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!*fd)
    return sys_error("lazyfs: open", path, errno);
  if (::flock(fd->get(), LOCK_SH) != 0)
    return sys_error("lazyfs: flock", path, errno);
  return fd;
}

/// True while some process holds the store's daemon lock.
bool lock_is_held(const std::string& store) {
  sys::unique_fd fd{::open(lock_path(store).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (!fd)
    return false;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0)
    return false; // released when fd closes
  return errno == EWOULDBLOCK;
}

/// A FUSE mount whose daemon is gone answers ENOTCONN: detach it.
void clean_stale_mount(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 && errno == ENOTCONN) {
    // SAFETY: a lazy detach of our own dead FUSE mount; nothing can read
    // through it any more (every read answers ENOTCONN).
    ::umount2(dir.c_str(), MNT_DETACH);
  }
}

std::string log_tail(const std::string& path) {
  auto text = sys::read_file(path);
  if (!text || text->empty())
    return "(" + path + " is empty)";
  auto tail = text->size() > 600 ? text->substr(text->size() - 600) : *text;
  while (!tail.empty() && tail.back() == '\n')
    tail.pop_back();
  return path + ": " + tail;
}

/// Double fork: the grandchild, in a new session and process group with an
/// empty signal mask (the node blocks SIGTERM in every thread) and stdio on
/// the log, execs `argv`. Returns once the intermediate child exited.
status spawn_detached(const std::string& exe, const std::vector<std::string>& argv,
                      const std::string& log) {
  sys::unique_fd log_fd{::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)};
  if (!log_fd)
    return sys_error("lazyfs: open daemon log", log, errno);
  sys::unique_fd null_fd{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  std::vector<char*> cargv;
  for (auto& a : argv)
    cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0)
    return sys_error("lazyfs: fork", "the daemon", errno);
  if (child == 0) {
    // SAFETY: between fork and exec only async-signal-safe calls.
    ::setsid();
    if (::fork() != 0)
      ::_exit(0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(null_fd.get(), 0);
    ::dup2(log_fd.get(), 1);
    ::dup2(log_fd.get(), 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::chdir("/");
    ::execv(exe.c_str(), cargv.data());
    ::_exit(127);
  }
  int ws = 0;
  while (::waitpid(child, &ws, 0) < 0 && errno == EINTR) {
  }
  return {};
}

expected<std::string> self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return sys_error("lazyfs: readlink", "/proc/self/exe", errno);
  buf[n] = '\0';
  return std::string{buf};
}

/// The pid in daemon.json if it still names a `dsec lazyfs` process.
int64_t live_daemon_pid(const std::string& store) {
  auto info = find_daemon(store);
  if (!info || info->pid <= 0)
    return 0;
  auto cmdline = sys::read_file("/proc/" + std::to_string(info->pid) + "/cmdline");
  if (!cmdline || cmdline->find(std::string{"lazyfs"} + '\0') == std::string::npos)
    return 0;
  return info->pid;
}

} // namespace

bool mount_is_live(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == fuse_super_magic;
}

uint64_t default_chunk_cache_mb(uint64_t fs_bytes, uint64_t free_bytes) {
  constexpr uint64_t mib = 1 << 20;
  uint64_t mb = std::clamp<uint64_t>(fs_bytes / 10 / mib, 2048, 64 * 1024);
  return std::max<uint64_t>(std::min(mb, free_bytes / 2 / mib), 256);
}

std::vector<std::string> daemon_args(const daemon_options& opts) {
  std::vector<std::string> a = {"dsec", "lazyfs", "--store", opts.store_root, "--cache",
                                opts.cache_dir};
  if (opts.chunk_cache_mb != 0)
    a.insert(a.end(), {"--chunk-cache-mb", std::to_string(opts.chunk_cache_mb)});
  auto& r = opts.registry;
  if (!r.auth_file.empty())
    a.insert(a.end(), {"--registry-auth", r.auth_file});
  if (!r.ca_file.empty())
    a.insert(a.end(), {"--registry-ca", r.ca_file});
  for (auto& h : r.insecure_hosts)
    a.insert(a.end(), {"--insecure-registry", h});
  for (auto& [reg, mirrors] : r.mirrors) {
    std::string v = reg + "=";
    for (size_t i = 0; i < mirrors.size(); ++i)
      v += (i ? "," : "") + mirrors[i];
    a.insert(a.end(), {"--registry-mirror", v});
  }
  return a;
}

expected<daemon_info> find_daemon(const std::string& store_root) {
  auto path = info_path(store_root);
  if (!lock_is_held(store_root) || !sys::exists(path))
    return not_found("lazyfs: no daemon serves " + store_root);
  auto text = sys::read_file(path);
  if (!text)
    return text.err();
  auto j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("lazyfs: " + path + " is not a JSON object");
  daemon_info info;
  info.pid = j.value("pid", int64_t{0});
  info.cache_dir = j.value("cache", std::string{});
  info.stats_path = j.value("stats", std::string{});
  info.mount_dir = registry::lazy_mount_dir(store_root);
  info.reused = true;
  return info;
}

expected<daemon_info> ensure_daemon(const daemon_options& opts) {
  auto mnt = registry::lazy_mount_dir(opts.store_root);
  for (auto& d : {lazy_dir(opts.store_root), mnt, registry::lazy_sources_dir(opts.store_root)})
    if (auto st = sys::make_dirs(d, 0755); !st)
      return error{st.err().code, "lazyfs: " + st.err().message};
  if (auto st = sys::make_dirs(opts.cache_dir, 0700); !st)
    return error{st.err().code, "lazyfs: " + st.err().message};
  auto hold = hold_users_lock(opts.store_root);
  if (!hold)
    return hold.err();
  if (lock_is_held(opts.store_root) && mount_is_live(mnt))
    if (auto info = find_daemon(opts.store_root); info) {
      info->hold = *hold;
      return info;
    }
  if (!lock_is_held(opts.store_root)) {
    clean_stale_mount(mnt);
    auto exe = opts.exe;
    if (exe.empty()) {
      auto self = self_exe();
      if (!self)
        return self.err();
      exe = *self;
    }
    auto log = opts.cache_dir + "/daemon.log";
    if (auto st = spawn_detached(exe, daemon_args(opts), log); !st)
      return st.err();
  }
  // Ours or one another node is starting: wait until it serves. A daemon
  // takes its lock within milliseconds; none after 2 s died at start (its
  // log says why), so the wait ends early.
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + opts.start_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::chrono::steady_clock::now() - start > 2s && !lock_is_held(opts.store_root))
      break;
    if (mount_is_live(mnt) && lock_is_held(opts.store_root))
      if (auto info = find_daemon(opts.store_root); info) {
        info->reused = false;
        info->hold = *hold;
        return info;
      }
    std::this_thread::sleep_for(10ms);
  }
  return unavailable("lazyfs: the blob daemon did not serve " + mnt + " (waited at most "
                     + std::to_string(opts.start_timeout.count()) + " ms); "
                     + log_tail(opts.cache_dir + "/daemon.log"));
}

status release_daemon(daemon_info& info, std::chrono::milliseconds wait) {
  if (!info.hold)
    return {};
  auto store = info.mount_dir.substr(0, info.mount_dir.size() - std::string{"/lazy/mnt"}.size());
  // Drop our share, then ask for the lock alone: held shared by another
  // node, the daemon stays for it. Held exclusive while stopping, so a node
  // starting now waits and then starts a fresh daemon.
  info.hold.reset();
  sys::unique_fd alone{::open(users_path(store).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (!alone || ::flock(alone.get(), LOCK_EX | LOCK_NB) != 0)
    return {};
  return stop_daemon(store, wait);
}

status stop_daemon(const std::string& store_root, std::chrono::milliseconds wait) {
  auto mnt = registry::lazy_mount_dir(store_root);
  auto info = find_daemon(store_root);
  if (!info) {
    clean_stale_mount(mnt);
    return {};
  }
  // The daemon rewrites its stats as soon as a blob is released; the kernel
  // releases it just after the layer's unmount, so allow a moment.
  auto open_now = [&] {
    auto s = read_stats(info->stats_path);
    return s ? s->open_files : int64_t{0};
  };
  for (int i = 0; i < 30 && open_now() > 0; ++i)
    std::this_thread::sleep_for(100ms);
  if (auto s = read_stats(info->stats_path); s && s->open_files > 0)
    return conflict("lazyfs: the daemon of " + store_root + " (pid " + std::to_string(info->pid)
                    + ") still serves " + std::to_string(s->open_files)
                    + " open blob(s) (lazy layers mounted elsewhere on this host); it stays");
  auto pid = live_daemon_pid(store_root);
  // SAFETY: detaching our own FUSE mount; its loop then ends and the
  // daemon exits. Nothing mounts a lazy layer now (checked above).
  if (::umount2(mnt.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
    return sys_error("lazyfs: unmount", mnt, errno);
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (lock_is_held(store_root)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (pid > 0)
        ::kill(pid_t(pid), SIGKILL);
      for (int i = 0; i < 100 && lock_is_held(store_root); ++i)
        std::this_thread::sleep_for(10ms);
      if (lock_is_held(store_root))
        return unavailable("lazyfs: the daemon of " + store_root + " (pid " + std::to_string(pid)
                           + ") did not exit");
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ::unlink(info_path(store_root).c_str());
  return {};
}

} // namespace dsec::lazyfs
