// Stat, list, mkdir, move and remove inside a container sandbox, for the E2B
// filesystem service. The same rules as files.cpp: every lookup is an openat2
// against the node's O_PATH view of the merged root with RESOLVE_IN_ROOT |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, and the last component of a path
// is always acted on relative to a parent resolved that way, never followed.
// Removal walks with openat(O_NOFOLLOW | O_DIRECTORY) on single names below
// such a parent and stays on the root's device, so an agent's symlinks and
// mounts cannot steer it outside.
#include "backends/container/fs_ops.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "backends/channel/sandbox_path.hpp"
#include "backends/container/fs_metadata.hpp" // E2B file metadata (issue 27)
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

std::string join(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s += (i ? "/" : "") + parts[i];
  return s;
}

std::string shown(const std::vector<std::string>& parts) { return "/" + join(parts, parts.size()); }

int open_rel(int root, const std::string& rel, int flags) {
  return sys::open_in_root(root, rel, flags, 0, RESOLVE_NO_XDEV);
}

const char* type_of(mode_t m) {
  if (S_ISREG(m))
    return "file";
  if (S_ISDIR(m))
    return "dir";
  if (S_ISLNK(m))
    return "symlink";
  return "other";
}

/// The entry `name` in directory `dir`, not followed.
expected<fs_entry> entry_at(int dir, const std::string& name, const std::string& path) {
  struct stat st;
  const char* n = name.empty() ? "" : name.c_str();
  if (::fstatat(dir, n, &st, AT_SYMLINK_NOFOLLOW | (name.empty() ? AT_EMPTY_PATH : 0)) != 0)
    return sys_error("stat", path, errno, file_errc(errno));
  fs_entry e;
  auto slash = path.rfind('/');
  e.name = slash == std::string::npos ? path : path.substr(slash + 1);
  e.path = path;
  e.type = type_of(st.st_mode);
  e.size = st.st_size;
  e.mode = st.st_mode;
  e.uid = st.st_uid;
  e.gid = st.st_gid;
  e.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    auto len = ::readlinkat(dir, n, buf, sizeof(buf));
    if (len > 0)
      e.symlink_target.assign(buf, static_cast<size_t>(len));
  }
  e.metadata = read_metadata_at(dir, name, st.st_mode);
  return e;
}

/// The directory holding the last component (made on the way if `make`).
expected<sys::unique_fd> parent_of(int root, const std::vector<std::string>& parts, bool make) {
  sys::unique_fd dir{::fcntl(root, F_DUPFD_CLOEXEC, 0)};
  for (size_t n = 1; n < parts.size(); ++n) {
    auto rel = join(parts, n);
    sys::unique_fd next{open_rel(root, rel, O_PATH | O_DIRECTORY)};
    if (!next && errno == ENOENT && make) {
      // A single name relative to a parent resolved in-root cannot escape.
      if (::mkdirat(dir.get(), parts[n - 1].c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("mkdir", "/" + rel, errno, file_errc(errno));
      next.reset(open_rel(root, rel, O_PATH | O_DIRECTORY));
    }
    if (!next)
      return sys_error("open", "/" + rel + " (parent of " + shown(parts) + ")", errno,
                       file_errc(errno));
    dir = std::move(next);
  }
  return dir;
}

expected<std::vector<fs_entry>> do_stat(int root, const std::vector<std::string>& parts) {
  sys::unique_fd fd{open_rel(root, join(parts, parts.size()), O_PATH | O_NOFOLLOW)};
  if (!fd)
    return sys_error("stat", shown(parts), errno, file_errc(errno));
  auto e = entry_at(fd.get(), "", parts.empty() ? "/" : shown(parts));
  if (!e)
    return e.err();
  if (parts.empty())
    e->name = "";
  return std::vector<fs_entry>{std::move(*e)};
}

status list_into(int dirfd, const std::string& path, int32_t depth,
                 std::vector<fs_entry>& out) {
  sys::unique_fd copy{::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!copy)
    return sys_error("open", path, errno, file_errc(errno));
  DIR* d = ::fdopendir(copy.release());
  if (!d)
    return sys_error("opendir", path, errno, file_errc(errno));
  std::vector<std::string> names;
  while (auto* ent = ::readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..")
      names.push_back(std::move(n));
  }
  ::closedir(d);
  for (auto& n : names) {
    if (out.size() >= max_list_entries)
      return too_large("list " + path + ": more than " + std::to_string(max_list_entries)
                       + " entries");
    auto child = (path == "/" ? "" : path) + "/" + n;
    auto e = entry_at(dirfd, n, child);
    if (!e) {
      if (e.err().code == errc::not_found) // removed while listing
        continue;
      return e.err();
    }
    bool dir = e->type == "dir";
    out.push_back(std::move(*e));
    if (dir && depth > 1) {
      sys::unique_fd sub{::openat(dirfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
      if (sub)
        if (auto st = list_into(sub.get(), child, depth - 1, out); !st)
          return st;
    }
  }
  return {};
}

expected<std::vector<fs_entry>> do_list(int root, const std::vector<std::string>& parts,
                                        int32_t depth) {
  sys::unique_fd fd{open_rel(root, join(parts, parts.size()), O_RDONLY | O_DIRECTORY)};
  if (!fd)
    return sys_error("list", shown(parts), errno, file_errc(errno));
  std::vector<fs_entry> out;
  if (auto st = list_into(fd.get(), parts.empty() ? "/" : shown(parts), depth, out); !st)
    return st.err();
  return out;
}

expected<std::vector<fs_entry>> do_mkdir(int root, const std::vector<std::string>& parts) {
  if (parts.empty())
    return error{errc::conflict, "make dir /: already exists"};
  auto parent = parent_of(root, parts, true);
  if (!parent)
    return parent.err();
  if (::mkdirat(parent->get(), parts.back().c_str(), 0755) != 0) {
    if (errno == EEXIST)
      return error{errc::conflict, "make dir " + shown(parts) + ": already exists"};
    return sys_error("mkdir", shown(parts), errno, file_errc(errno));
  }
  auto e = entry_at(parent->get(), parts.back(), shown(parts));
  if (!e)
    return e.err();
  return std::vector<fs_entry>{std::move(*e)};
}

expected<std::vector<fs_entry>> do_move(int root, const std::vector<std::string>& from,
                                        const std::vector<std::string>& to) {
  if (from.empty() || to.empty())
    return invalid_argument("move: the root directory cannot be moved or replaced");
  auto src = parent_of(root, from, false);
  if (!src)
    return src.err();
  auto dst = parent_of(root, to, true);
  if (!dst)
    return dst.err();
  if (::renameat(src->get(), from.back().c_str(), dst->get(), to.back().c_str()) != 0)
    return sys_error("move " + shown(from) + " to", shown(to), errno, file_errc(errno));
  auto e = entry_at(dst->get(), to.back(), shown(to));
  if (!e)
    return e.err();
  return std::vector<fs_entry>{std::move(*e)};
}

/// Removes everything in directory `dir` (on device `dev`), depth first.
status empty_dir(int dir, dev_t dev, const std::string& path, int levels) {
  if (levels > 256)
    return invalid_argument("remove " + path + ": nested deeper than 256 levels");
  sys::unique_fd copy{::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  DIR* d = copy ? ::fdopendir(copy.release()) : nullptr;
  if (!d)
    return sys_error("open", path, errno, file_errc(errno));
  std::vector<std::string> names;
  while (auto* ent = ::readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..")
      names.push_back(std::move(n));
  }
  ::closedir(d);
  for (auto& n : names) {
    struct stat st;
    if (::fstatat(dir, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev)
        return invalid_argument("remove " + path + "/" + n + ": a mount point");
      sys::unique_fd sub{::openat(dir, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
      if (!sub)
        return sys_error("open", path + "/" + n, errno, file_errc(errno));
      if (auto s = empty_dir(sub.get(), dev, path + "/" + n, levels + 1); !s)
        return s;
      if (::unlinkat(dir, n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        return sys_error("remove", path + "/" + n, errno, file_errc(errno));
    } else if (::unlinkat(dir, n.c_str(), 0) != 0 && errno != ENOENT) {
      return sys_error("remove", path + "/" + n, errno, file_errc(errno));
    }
  }
  return {};
}

expected<std::vector<fs_entry>> do_remove(int root, const std::vector<std::string>& parts) {
  if (parts.empty())
    return invalid_argument("remove /: the root directory cannot be removed");
  auto parent = parent_of(root, parts, false);
  if (!parent)
    return parent.err();
  struct stat st;
  const auto& name = parts.back();
  if (::fstatat(parent->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return sys_error("remove", shown(parts), errno, file_errc(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent->get(), name.c_str(), 0) != 0)
      return sys_error("remove", shown(parts), errno, file_errc(errno));
    return std::vector<fs_entry>{};
  }
  struct stat rst;
  if (::fstat(root, &rst) != 0 || rst.st_dev != st.st_dev)
    return invalid_argument("remove " + shown(parts) + ": a mount point");
  sys::unique_fd dir{::openat(parent->get(), name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (!dir)
    return sys_error("open", shown(parts), errno, file_errc(errno));
  if (auto s = empty_dir(dir.get(), st.st_dev, shown(parts), 0); !s)
    return s.err();
  if (::unlinkat(parent->get(), name.c_str(), AT_REMOVEDIR) != 0)
    return sys_error("remove", shown(parts), errno, file_errc(errno));
  return std::vector<fs_entry>{};
}

/// Replaces the E2B metadata of a file or directory; answers its entry.
expected<std::vector<fs_entry>> do_set_metadata(int root, const std::vector<std::string>& parts,
                                                const std::map<std::string, std::string>& m) {
  sys::unique_fd fd{open_rel(root, join(parts, parts.size()), O_PATH | O_NOFOLLOW)};
  if (!fd)
    return sys_error("set metadata of", shown(parts), errno, file_errc(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return sys_error("stat", shown(parts), errno, file_errc(errno));
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return invalid_argument("set metadata of " + shown(parts)
                            + ": only files and directories carry metadata");
  if (auto done = replace_metadata(fd.get(), shown(parts), m); !done)
    return done.err();
  return do_stat(root, parts);
}

} // namespace

expected<std::vector<fs_entry>> file_op_in_root(int root, const std::string& op,
                                                const std::string& path, const std::string& to,
                                                int32_t depth) {
  auto parts = parse_sandbox_path(path, path_form::entry_or_root);
  if (!parts)
    return parts.err();
  if (op == fs_ops::stat)
    return do_stat(root, *parts);
  if (op == fs_ops::list) {
    if (depth < 1 || depth > 64)
      return invalid_argument("list " + path + ": depth must be between 1 and 64");
    return do_list(root, *parts, depth);
  }
  if (op == fs_ops::mkdir)
    return do_mkdir(root, *parts);
  if (op == fs_ops::remove)
    return do_remove(root, *parts);
  if (op == fs_ops::move) {
    auto dest = parse_sandbox_path(to, path_form::entry_or_root);
    if (!dest)
      return dest.err();
    return do_move(root, *parts, *dest);
  }
  if (op == fs_ops::set_metadata)
    return do_set_metadata(root, *parts, parse_metadata_lines(to));
  return invalid_argument("file operation \"" + op.substr(0, 64) + "\": unknown");
}

} // namespace dsec::backends
