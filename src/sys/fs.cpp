// Filesystem helpers.
#include "sys/fs.hpp"

#include <dirent.h>
#include <sys/mount.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "sys/fd.hpp"

namespace dsec::sys {

status make_dirs(const std::string& path, mode_t mode) {
  if (path.empty())
    return invalid_argument("make_dirs: empty path");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty())
      continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST)
      return sys_error("mkdir", cur, errno);
  }
  return {};
}

expected<std::string> read_file(const std::string& path) {
  unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("open", path, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return sys_error("read", path, errno);
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

static status write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    auto n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return sys_error("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

status write_file_atomic(const std::string& path, std::string_view data, mode_t mode,
                         durability d) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  auto tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng() % 1000000);
  unique_fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)};
  if (!fd)
    return sys_error("create", tmp, errno);
  if (auto st = write_all(fd.get(), data, tmp); !st) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (d == durability::host_crash && ::fsync(fd.get()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error("fsync", tmp, err);
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error("rename", tmp + " -> " + path, err);
  }
  return {};
}

bool pread_all(int fd, char* out, size_t len, uint64_t offset) {
  for (size_t done = 0; done < len;) {
    auto n = ::pread(fd, out + done, len - done, off_t(offset + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

bool pwrite_all(int fd, const char* data, size_t len, uint64_t offset) {
  for (size_t done = 0; done < len;) {
    auto n = ::pwrite(fd, data + done, len - done, off_t(offset + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = ENOSPC;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

status write_text(const std::string& path, std::string_view data) {
  unique_fd fd{::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC)};
  if (!fd)
    return sys_error("open", path, errno);
  return write_all(fd.get(), data, path);
}

static status remove_at(int dirfd, const char* name, dev_t dev, const std::string& shown) {
  struct stat st;
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT ? status{} : status{sys_error("stat", shown, errno)};
  if (S_ISDIR(st.st_mode)) {
    if (st.st_dev != dev)
      return sys_error("remove", shown, EBUSY);
    unique_fd fd{::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!fd)
      return sys_error("open", shown, errno);
    DIR* d = ::fdopendir(::dup(fd.get()));
    if (!d)
      return sys_error("opendir", shown, errno);
    status result;
    while (auto* e = ::readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, ".."))
        continue;
      auto st2 = remove_at(fd.get(), e->d_name, dev, shown + "/" + e->d_name);
      if (!st2 && result)
        result = st2;
    }
    ::closedir(d);
    if (!result)
      return result;
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
      return sys_error("rmdir", shown, errno);
    return {};
  }
  if (::unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
    return sys_error("unlink", shown, errno);
  return {};
}

status remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return errno == ENOENT ? status{} : status{sys_error("stat", path, errno)};
  return remove_at(AT_FDCWD, path.c_str(), st.st_dev, path);
}

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      auto oct = s.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(oct, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

} // namespace

std::vector<mount_entry> mounts() {
  std::vector<mount_entry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, parent, devno, root, mnt, field, fstype, source;
    ls >> id >> parent >> devno >> root >> mnt;
    while (ls >> field && field != "-") { // optional fields end at "-"
    }
    ls >> fstype >> source;
    out.push_back({unescape_mountinfo(mnt), fstype, unescape_mountinfo(source)});
  }
  return out;
}

void unmount_below(const std::string& dir) {
  std::vector<std::string> below;
  auto prefix = dir + "/";
  for (auto& m : mounts())
    if (m.point.compare(0, prefix.size(), prefix) == 0)
      below.push_back(m.point);
  std::sort(below.begin(), below.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (auto& m : below)
    ::umount2(m.c_str(), MNT_DETACH);
}

bool dir_is_empty(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return true;
  bool empty = true;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != ".." && n != "lost+found") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_mount_point(const std::string& path) {
  for (auto& m : mounts())
    if (m.point == path)
      return true;
  return false;
}

int open_in_root(int root, const std::string& rel, int flags, mode_t mode,
                 uint64_t extra_resolve) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | extra_resolve;
  const char* p = rel.empty() ? "." : rel.c_str();
  for (int i = 0;; ++i) {
    long fd = ::syscall(SYS_openat2, root, p, &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN || i == 8)
      return static_cast<int>(fd);
  }
}

} // namespace dsec::sys
