// Directory watches of a container sandbox (sandbox::watch_dir): inotify on
// the node's view of the sandbox root, read on the backends' io_loop thread,
// so no actor thread ever waits for a change.
//
// The agent owns everything below the root and may swap a watched directory
// for a symlink at any time, so a path is never handed to inotify as it is:
// each directory is opened first with openat2 in-root (RESOLVE_IN_ROOT,
// no magic links, no other mounts), then watched through that descriptor's
// /proc/self/fd entry, which names the very inode that was opened. A
// directory made later (recursive watches) is opened the same way, from the
// root, so a symlink planted in its place leads nowhere outside.
//
// Event names follow E2B's envd (fsnotify's mapping): a file made or moved in
// is "create", a write "write", an unlink "remove", a move out "rename", an
// attribute change "chmod".
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/channel/sandbox_path.hpp"
#include "backends/container/container_sandbox.hpp"
#include "core/sandbox_path.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

/// Most directories one watch holds: each costs a kernel watch (the user's
/// max_user_watches is shared by every sandbox on the node). A recursive
/// watch over a larger tree is refused rather than silently partial.
constexpr size_t max_watched_dirs = 8192;

constexpr uint32_t watch_mask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
                                | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

std::string join_rel(const std::string& a, const std::string& b) {
  if (a.empty())
    return b;
  if (b.empty())
    return a;
  return a + "/" + b;
}

/// What the loop thread and the handle share: the inotify descriptor and the
/// map from kernel watch to directory.
struct watch_core {
  std::mutex m;
  sys::unique_fd fd;
  std::weak_ptr<sys::unique_fd> root;
  /// The watched directory, relative to the sandbox root ("" = the root).
  std::string base;
  /// As the caller wrote it, for messages.
  std::string shown;
  bool recursive = false;
  /// Kernel watch -> directory relative to `base` ("" = base itself).
  std::unordered_map<int, std::string> dirs;
  int base_wd = -1;
  watch_callbacks cb;
  /// Released or ended: no callback runs any more.
  bool done = false;

  /// Opens `rel` (relative to base) in-root and watches it; with `walk`,
  /// every directory below it too. Called with `m` held.
  status add_dir(const std::string& rel, bool walk) {
    if (dirs.size() >= max_watched_dirs)
      return resource_exhausted("watch " + shown + ": more than "
                                + std::to_string(max_watched_dirs) + " directories");
    auto r = root.lock();
    if (!r || !*r)
      return unavailable("watch " + shown + ": sandbox destroyed");
    auto full = join_rel(base, rel);
    // O_RDONLY (not O_PATH) so the same descriptor lists the directory.
    // The watched directory itself may be reached through symlinks (in-root);
    // below it, a symlink in place of a directory is not followed at all.
    int flags = O_RDONLY | O_DIRECTORY | O_NONBLOCK | (rel.empty() ? 0 : O_NOFOLLOW);
    sys::unique_fd dir{sys::open_in_root(r->get(), full, flags, 0, RESOLVE_NO_XDEV)};
    if (!dir)
      return sys_error("open", "/" + full, errno, file_errc(errno));
    auto proc = "/proc/self/fd/" + std::to_string(dir.get());
    int wd = ::inotify_add_watch(fd.get(), proc.c_str(), watch_mask);
    if (wd < 0)
      return sys_error("inotify_add_watch", "/" + full, errno,
                       errno == ENOSPC ? errc::resource_exhausted : file_errc(errno));
    dirs[wd] = rel;
    if (!walk)
      return {};
    // The listing comes from the descriptor just watched: a directory made
    // between the two is both listed and reported; never missed.
    DIR* d = ::fdopendir(dir.release());
    if (!d)
      return sys_error("fdopendir", "/" + full, errno);
    std::vector<std::string> subdirs;
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..")
        continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        is_dir = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0
                 && S_ISDIR(st.st_mode);
      }
      if (is_dir)
        subdirs.push_back(join_rel(rel, name));
    }
    ::closedir(d);
    for (auto& s : subdirs) {
      auto st = add_dir(s, true);
      // Gone again, or turned into a symlink: nothing to watch there.
      if (!st && st.err().code != errc::not_found && st.err().code != errc::invalid_argument)
        return st;
    }
    return {};
  }

  /// Stops watching `rel` and everything below it (moved or removed).
  void drop_below(const std::string& rel) {
    for (auto it = dirs.begin(); it != dirs.end();) {
      auto& p = it->second;
      if (p == rel || (p.size() > rel.size() && p.compare(0, rel.size(), rel) == 0
                       && p[rel.size()] == '/')) {
        ::inotify_rm_watch(fd.get(), it->first);
        it = dirs.erase(it);
      } else {
        ++it;
      }
    }
  }

  /// Called on the loop thread when the descriptor is readable.
  void on_readable() {
    std::vector<dir_event> out;
    error end;
    {
      std::lock_guard<std::mutex> g{m};
      if (done)
        return;
      alignas(inotify_event) char buf[64 * 1024];
      for (;;) {
        auto n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0)
          break;
        for (char* p = buf; p < buf + n;) {
          auto* ev = reinterpret_cast<inotify_event*>(p);
          p += sizeof(inotify_event) + ev->len;
          if (!end)
            end = one_event(*ev, out);
        }
      }
      if (end)
        done = true;
    }
    for (auto& e : out)
      cb.on_event(std::move(e));
    if (end)
      cb.on_end(std::move(end));
  }

  /// Turns one kernel event into `out`; an error ends the watch.
  error one_event(const inotify_event& ev, std::vector<dir_event>& out) {
    if (ev.mask & IN_Q_OVERFLOW)
      return resource_exhausted("watch " + shown + ": the kernel dropped events (queue full)");
    auto it = dirs.find(ev.wd);
    if (ev.mask & IN_IGNORED) {
      if (it != dirs.end())
        dirs.erase(it);
      if (ev.wd == base_wd)
        return not_found("watch " + shown + ": the directory was removed or moved");
      return {};
    }
    if (it == dirs.end())
      return {}; // a directory dropped a moment ago
    if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
      // A subdirectory's own end is reported by its parent; the watched
      // directory's ends the watch (IN_IGNORED follows).
      if (ev.wd == base_wd)
        out.push_back({ev.mask & IN_DELETE_SELF ? "remove" : "rename", ""});
      return {};
    }
    auto name = join_rel(it->second, ev.len > 0 ? std::string{ev.name} : std::string{});
    bool is_dir = ev.mask & IN_ISDIR;
    if (ev.mask & (IN_CREATE | IN_MOVED_TO)) {
      out.push_back({"create", name});
      if (is_dir && recursive) {
        auto st = add_dir(name, true);
        if (!st && st.err().code != errc::not_found && st.err().code != errc::invalid_argument)
          return st.err();
      }
    }
    if (ev.mask & IN_MODIFY)
      out.push_back({"write", name});
    if (ev.mask & IN_ATTRIB)
      out.push_back({"chmod", name});
    if (ev.mask & IN_DELETE)
      out.push_back({"remove", name});
    if (ev.mask & IN_MOVED_FROM) {
      out.push_back({"rename", name});
      if (is_dir && recursive)
        drop_below(name);
    }
    return {};
  }
};

class inotify_watch final : public dir_watch {
 public:
  inotify_watch(std::shared_ptr<io_loop> loop, std::shared_ptr<watch_core> core)
    : loop_(std::move(loop)), core_(std::move(core)) {}

  ~inotify_watch() override {
    {
      std::lock_guard<std::mutex> g{core_->m};
      core_->done = true;
    }
    // The loop's handler holds the core (and so the descriptor) until it is
    // removed; a handler running now sees `done` and returns.
    if (token_)
      loop_->remove(token_, core_->fd.get());
  }

  void start() override {
    auto core = core_;
    token_ = loop_->add(core->fd.get(), EPOLLIN, [core](uint32_t) { core->on_readable(); });
  }

 private:
  std::shared_ptr<io_loop> loop_;
  std::shared_ptr<watch_core> core_;
  uint64_t token_ = 0;
};

} // namespace

expected<std::shared_ptr<dir_watch>>
container_sandbox::watch_dir(const std::string& path, bool recursive, watch_callbacks cb) {
  auto root = root_fd();
  if (!root || !*root)
    return unavailable("watch " + path + " in " + parts_.id + ": sandbox destroyed");
  auto core = std::make_shared<watch_core>();
  core->shown = path;
  auto parts = parse_sandbox_path(path, path_form::entry_or_root);
  if (!parts)
    return parts.err();
  for (auto& p : *parts)
    core->base = join_rel(core->base, p);
  core->root = root;
  core->recursive = recursive;
  core->cb = std::move(cb);
  core->fd.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!core->fd)
    return sys_error("inotify_init1", "watch " + path + " in " + parts_.id, errno,
                     errno == EMFILE ? errc::resource_exhausted : errc::internal);
  {
    std::lock_guard<std::mutex> g{core->m};
    if (auto st = core->add_dir("", recursive); !st)
      return st.err();
    for (auto& [wd, rel] : core->dirs)
      if (rel.empty())
        core->base_wd = wd;
  }
  return std::shared_ptr<dir_watch>{std::make_shared<inotify_watch>(loop_, std::move(core))};
}

} // namespace dsec::backends
