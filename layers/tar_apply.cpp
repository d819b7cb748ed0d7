// Applying a layer tar: libarchive reads, we write with openat2(2)
// RESOLVE_IN_ROOT (see tar_apply.hpp for why).
//
// Device nodes (char and block) are skipped and counted: a sandbox gets its
// own /dev and cannot mknod, so image device nodes are never what a sandbox
// opens, and leaving them out of the EROFS image removes a way to reach host
// devices should a mount ever lack nodev. FIFOs are kept (harmless, and some
// tools expect theirs). Timestamps are not restored: the store stamps every
// file with image_epoch so the same tree gives the same digest.
//
// Extended attributes: only `user.*` and `security.capability` are kept. A
// layer must not be able to plant `trusted.overlay.*` (redirects, opaque
// markers, metacopy) that overlayfs would honour when the image is a lower,
// nor security labels meant for some other host.
#include "layers/tar_apply.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <memory>
#include <unordered_set>
#include <vector>

#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

using sys::unique_fd;

constexpr std::string_view whiteout_prefix = ".wh.";
constexpr std::string_view opaque_marker = ".wh..wh..opq";

// "./a//b/" -> "a/b"; a leading "/" is dropped (tar strips it too); a ".."
// component is an error: no legitimate layer names one.
expected<std::string> normalize(const char* raw, const std::string& what) {
  if (!raw)
    return invalid_argument(what + ": an entry has no path name");
  std::string in{raw}, out;
  size_t i = 0;
  while (i <= in.size()) {
    auto j = in.find('/', i);
    if (j == std::string::npos)
      j = in.size();
    auto comp = in.substr(i, j - i);
    i = j + 1;
    if (comp.empty() || comp == ".")
      continue;
    if (comp == "..")
      return invalid_argument(what + ": entry \"" + in
                              + "\" has a \"..\" component (refused: it would leave the image)");
    out += (out.empty() ? "" : "/") + comp;
  }
  return out;
}

std::pair<std::string, std::string> split_parent(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos)
    return {"", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

bool keep_xattr(const char* name) {
  return std::strncmp(name, "user.", 5) == 0 || std::strcmp(name, "security.capability") == 0;
}

// rm -rf of `name` in `dirfd`, never following symlinks. The staging tree
// holds no mounts, so no device check is needed.
status remove_child(int dirfd, const std::string& name, const std::string& shown) {
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? status{} : status{sys_error("stat", shown, errno)};
  if (S_ISDIR(st.st_mode)) {
    unique_fd fd{::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!fd)
      return sys_error("open", shown, errno);
    std::vector<std::string> names;
    if (DIR* d = ::fdopendir(::dup(fd.get()))) {
      while (auto* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
          names.emplace_back(e->d_name);
      ::closedir(d);
    } else {
      return sys_error("opendir", shown, errno);
    }
    for (auto& n : names)
      if (auto s = remove_child(fd.get(), n, shown + "/" + n); !s)
        return s;
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return sys_error("rmdir", shown, errno);
    return {};
  }
  if (::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT)
    return sys_error("unlink", shown, errno);
  return {};
}

struct archive_deleter {
  void operator()(archive* a) const { archive_read_free(a); }
};

// One layer being applied: the root fd, the options and the paths this layer
// wrote (with their ancestors), which whiteouts and opaque markers must spare.
class applier {
 public:
  applier(int root, std::string what, apply_stats& stats, const apply_options& opts)
    : root_(root), what_(std::move(what)), stats_(stats), opts_(opts) {}

  status entry(archive* a, archive_entry* e) {
    auto path = normalize(archive_entry_pathname(e), what_);
    if (!path)
      return path.err();
    if (path->empty())
      return {}; // the root itself ("./"): its mode is the staging dir's
    auto [parent, name] = split_parent(*path);
    if (opts_.whiteouts && name.compare(0, whiteout_prefix.size(), whiteout_prefix) == 0) {
      if (name == opaque_marker)
        return opaque(parent);
      if (name.compare(0, 8, ".wh..wh.") == 0)
        return {}; // aufs bookkeeping (.wh..wh.plnk and friends): no meaning here
      return whiteout(parent, name.substr(whiteout_prefix.size()));
    }
    auto pfd = ensure_dir(parent);
    if (!pfd)
      return pfd.err();
    mark(*path);
    if (const char* target = archive_entry_hardlink(e))
      return hardlink(pfd->get(), *path, name, target);
    auto type = archive_entry_filetype(e);
    if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFSOCK) {
      ++stats_.skipped_devices;
      // The layer replaced whatever was there: drop the lower one too.
      return remove_child(pfd->get(), name, shown(*path));
    }
    auto mode = static_cast<mode_t>(archive_entry_perm(e) & 07777);
    auto uid = static_cast<uid_t>(archive_entry_uid(e));
    auto gid = static_cast<gid_t>(archive_entry_gid(e));
    ++stats_.entries;
    if (type == AE_IFDIR)
      return directory(pfd->get(), *path, name, mode, uid, gid, e);
    if (auto s = replace(pfd->get(), *path, name); !s)
      return s;
    if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(e);
      if (::symlinkat(target ? target : "", pfd->get(), name.c_str()) != 0)
        return sys_error("symlink", shown(*path), errno);
      if (opts_.keep_owner
          && ::fchownat(pfd->get(), name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
        return sys_error("chown", shown(*path), errno);
      return {};
    }
    if (type == AE_IFIFO) {
      // Just created by us, so not a symlink: fchmodat may follow nothing.
      if (::mknodat(pfd->get(), name.c_str(), S_IFIFO | 0600, 0) != 0)
        return sys_error("mkfifo", shown(*path), errno);
      if (opts_.keep_owner
          && ::fchownat(pfd->get(), name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
        return sys_error("chown", shown(*path), errno);
      if (::fchmodat(pfd->get(), name.c_str(), mode, 0) != 0)
        return sys_error("chmod", shown(*path), errno);
      return {};
    }
    if (type != AE_IFREG)
      return invalid_argument(what_ + ": entry \"" + *path + "\" has an unknown file type");
    return regular(a, pfd->get(), *path, name, mode, uid, gid, e);
  }

 private:
  std::string shown(const std::string& path) const { return what_ + ": " + path; }

  void mark(const std::string& path) {
    for (auto p = path; !p.empty() && written_.insert(p).second; p = split_parent(p).first) {
    }
  }

  // mkdir -p of `rel` inside the root; returns an O_PATH fd of it. A path
  // component that is a dangling symlink (or a file) is an error.
  expected<unique_fd> ensure_dir(const std::string& rel) {
    unique_fd fd{sys::open_in_root(root_, rel, O_PATH | O_DIRECTORY)};
    if (fd)
      return fd;
    if (errno != ENOENT)
      return sys_error("open directory", shown(rel), errno, errc::invalid_argument);
    auto [parent, name] = split_parent(rel);
    auto pfd = ensure_dir(parent);
    if (!pfd)
      return pfd.err();
    if (::mkdirat(pfd->get(), name.c_str(), 0755) != 0 && errno != EEXIST)
      return sys_error("mkdir", shown(rel), errno);
    fd.reset(::openat(pfd->get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd)
      return sys_error("open directory", shown(rel) + " (a symlink whose target is missing?)",
                       errno, errc::invalid_argument);
    return fd;
  }

  // Removes what is at `name` unless it is a directory that `path` keeps.
  status replace(int pfd, const std::string& path, const std::string& name) {
    return remove_child(pfd, name, shown(path));
  }

  status owner_mode(int fd, const std::string& path, mode_t mode, uid_t uid, gid_t gid,
                    archive_entry* e) {
    // chown first: it clears set-id bits that the chmod then restores.
    if (opts_.keep_owner && ::fchownat(fd, "", uid, gid, AT_EMPTY_PATH) != 0)
      return sys_error("chown", shown(path), errno);
    if (::fchmod(fd, mode) != 0)
      return sys_error("chmod", shown(path), errno);
    if (e) {
      const char* xname;
      const void* value;
      size_t size;
      archive_entry_xattr_reset(e);
      while (archive_entry_xattr_next(e, &xname, &value, &size) == ARCHIVE_OK)
        if (xname && keep_xattr(xname) && ::fsetxattr(fd, xname, value, size, 0) != 0)
          return sys_error(std::string{"setxattr "} + xname, shown(path), errno);
    }
    return {};
  }

  status directory(int pfd, const std::string& path, const std::string& name, mode_t mode,
                   uid_t uid, gid_t gid, archive_entry* e) {
    struct stat st;
    bool exists = ::fstatat(pfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (exists && !S_ISDIR(st.st_mode)) {
      if (auto s = remove_child(pfd, name, shown(path)); !s)
        return s;
      exists = false;
    }
    if (!exists && ::mkdirat(pfd, name.c_str(), 0700) != 0)
      return sys_error("mkdir", shown(path), errno);
    unique_fd fd{::openat(pfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!fd)
      return sys_error("open directory", shown(path), errno);
    return owner_mode(fd.get(), path, mode, uid, gid, e);
  }

  status regular(archive* a, int pfd, const std::string& path, const std::string& name,
                 mode_t mode, uid_t uid, gid_t gid, archive_entry* e) {
    unique_fd fd{::openat(pfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          0600)};
    if (!fd)
      return sys_error("create", shown(path), errno);
    const void* buf;
    size_t size;
    la_int64_t offset;
    for (;;) {
      int r = archive_read_data_block(a, &buf, &size, &offset);
      if (r == ARCHIVE_EOF)
        break;
      if (r < ARCHIVE_WARN)
        return invalid_argument(what_ + ": read data of \"" + path + "\": "
                                + (archive_error_string(a) ? archive_error_string(a) : "?"));
      auto* p = static_cast<const char*>(buf);
      while (size > 0) {
        auto n = ::pwrite(fd.get(), p, size, offset);
        if (n < 0) {
          if (errno == EINTR)
            continue;
          return sys_error("write", shown(path), errno);
        }
        p += n, size -= static_cast<size_t>(n), offset += n;
        stats_.bytes += n;
      }
    }
    // Sparse files end in a hole that no data block covers.
    if (archive_entry_size_is_set(e) && ::ftruncate(fd.get(), archive_entry_size(e)) != 0)
      return sys_error("truncate", shown(path), errno);
    return owner_mode(fd.get(), path, mode, uid, gid, e);
  }

  status hardlink(int pfd, const std::string& path, const std::string& name, const char* raw) {
    auto target = normalize(raw, what_);
    if (!target)
      return target.err();
    if (*target == path)
      return {}; // a link to itself: the file is already there
    auto [tparent, tname] = split_parent(*target);
    unique_fd tfd{sys::open_in_root(root_, tparent, O_PATH | O_DIRECTORY)};
    if (!tfd || tname.empty())
      return invalid_argument(what_ + ": hardlink \"" + path + "\" -> \"" + *target
                              + "\": the target's directory does not exist in the image");
    if (auto s = replace(pfd, path, name); !s)
      return s;
    // No AT_SYMLINK_FOLLOW: a link to a symlink links the symlink itself,
    // as tar means, and never follows it out of the root. ENOENT (no such
    // target) and EPERM (a directory) are the layer's fault.
    if (::linkat(tfd.get(), tname.c_str(), pfd, name.c_str(), 0) != 0)
      return sys_error("hardlink " + path + " ->", what_ + ": " + *target, errno,
                       errno == ENOENT || errno == EPERM ? errc::invalid_argument
                                                         : errc::internal);
    ++stats_.hardlinks;
    ++stats_.entries;
    return {};
  }

  // `.wh.NAME`: NAME disappears, unless this very layer wrote it (a whiteout
  // only hides lower layers).
  status whiteout(const std::string& parent, const std::string& target) {
    if (target.empty() || target == "." || target == "..")
      return invalid_argument(what_ + ": whiteout \"" + join(parent, ".wh." + target)
                              + "\" names no file");
    ++stats_.whiteouts;
    if (written_.count(join(parent, target)))
      return {};
    unique_fd pfd{sys::open_in_root(root_, parent, O_PATH | O_DIRECTORY)};
    if (!pfd)
      return {}; // nothing below to hide
    return remove_child(pfd.get(), target, shown(join(parent, target)));
  }

  // `.wh..wh..opq`: the directory keeps only what this layer puts in it
  // (before or after the marker: tar order is not guaranteed).
  status opaque(const std::string& dir) {
    ++stats_.opaque_dirs;
    auto made = ensure_dir(dir);
    if (!made)
      return made.err();
    mark(dir);
    unique_fd fd{sys::open_in_root(root_, dir, O_RDONLY | O_DIRECTORY)};
    if (!fd)
      return sys_error("open directory", shown(dir), errno);
    return clear_unwritten(fd.get(), dir);
  }

  status clear_unwritten(int dirfd, const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = ::fdopendir(::dup(dirfd))) {
      while (auto* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
          names.emplace_back(e->d_name);
      ::closedir(d);
    } else {
      return sys_error("opendir", shown(dir), errno);
    }
    for (auto& n : names) {
      auto child = join(dir, n);
      if (!written_.count(child)) {
        if (auto s = remove_child(dirfd, n, shown(child)); !s)
          return s;
        continue;
      }
      struct stat st;
      if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        unique_fd sub{::openat(dirfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!sub)
          return sys_error("open directory", shown(child), errno);
        if (auto s = clear_unwritten(sub.get(), child); !s)
          return s;
      }
    }
    return {};
  }

  int root_;
  std::string what_;
  apply_stats& stats_;
  const apply_options& opts_;
  std::unordered_set<std::string> written_;
};

} // namespace

status apply_tar(const std::string& archive_path, const std::string& root_dir,
                 const std::string& what, apply_stats& stats, const apply_options& opts) {
  unique_fd root{::open(root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
  if (!root)
    return sys_error("apply " + what + ": open root", root_dir, errno);
  std::unique_ptr<archive, archive_deleter> a{archive_read_new()};
  if (!a)
    return internal_error("apply " + what + ": libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  // libarchive detects the format (and compression) at open.
  if (archive_read_open_filename(a.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    auto* msg = archive_error_string(a.get());
    // libarchive reports an unrecognised format as EILSEQ (its ARCHIVE_ERRNO_FILE_FORMAT).
    bool format = archive_errno(a.get()) == EILSEQ;
    return invalid_argument(what + " (" + archive_path + "): "
                            + (format ? "not a tar archive: " : "cannot open: ")
                            + (msg ? msg : "?"));
  }
  applier ap{root.get(), what, stats, opts};
  for (bool first = true;; first = false) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF)
      return {};
    if (r == ARCHIVE_RETRY)
      continue;
    if (r < ARCHIVE_WARN) {
      std::string msg = archive_error_string(a.get()) ? archive_error_string(a.get()) : "?";
      return invalid_argument(what + " (" + archive_path + "): "
                              + (first ? "not a tar archive: " : "corrupt tar archive: ") + msg);
    }
    if (auto s = ap.entry(a.get(), e); !s)
      return s;
  }
}

} // namespace dsec::layers
