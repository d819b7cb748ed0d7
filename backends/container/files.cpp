// File transfer into and out of a sandbox without trusting its contents. The
// agent owns everything below the root and may plant symlinks anywhere
// (/etc/x -> /etc/shadow, ../../.., magic links in /proc): every lookup goes
// through openat2 against an O_PATH descriptor of the merged root with
// RESOLVE_IN_ROOT (symlinks and ".." are clamped at the root),
// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV, so the node never opens a file
// outside the sandbox. Parent directories are made one level at a time,
// relative to a parent that was itself resolved the same way.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "backends/channel/sandbox_path.hpp"
#include "backends/container/container_sandbox.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

// Calls stay on the sandbox's own mounts, too.
int open_in_root(int root, const std::string& rel, int flags, mode_t mode) {
  return sys::open_in_root(root, rel, flags, mode, RESOLVE_NO_XDEV);
}

std::string join(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s += (i ? "/" : "") + parts[i];
  return s;
}

// Opens (making on the way) the directory holding the last component.
expected<sys::unique_fd> open_parent(int root, const std::vector<std::string>& parts,
                                     const std::string& shown) {
  sys::unique_fd dir{::fcntl(root, F_DUPFD_CLOEXEC, 0)};
  for (size_t n = 1; n < parts.size(); ++n) {
    auto rel = join(parts, n);
    sys::unique_fd next{open_in_root(root, rel, O_PATH | O_DIRECTORY, 0)};
    if (!next && errno == ENOENT) {
      // Relative to a parent resolved in-root; a single name cannot escape.
      if (::mkdirat(dir.get(), parts[n - 1].c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("mkdir", "/" + rel, errno, file_errc(errno));
      next.reset(open_in_root(root, rel, O_PATH | O_DIRECTORY, 0));
    }
    if (!next)
      return sys_error("open", "/" + rel + " (parent of " + shown + ")", errno, file_errc(errno));
    dir = std::move(next);
  }
  return dir;
}

} // namespace

status write_in_root(int root, const std::string& path, std::string_view data, uint32_t mode) {
  auto parts = parse_sandbox_path(path, path_form::entry);
  if (!parts)
    return parts.err();
  if (auto parent = open_parent(root, *parts, path); !parent)
    return parent.err();
  // O_NONBLOCK: a FIFO planted by the agent must not block the node's worker
  // (ENXIO without a reader, or an fd that fails the regular-file check).
  sys::unique_fd fd{open_in_root(root, join(*parts, parts->size()),
                                 O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode & 07777)};
  if (!fd && errno == ENXIO)
    return invalid_argument("write " + path + ": not a regular file");
  if (!fd)
    return sys_error("open", path, errno, file_errc(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("write " + path + ": not a regular file");
  if (::ftruncate(fd.get(), 0) != 0) // only now that it is known to be a regular file
    return sys_error("truncate", path, errno, file_errc(errno));
  while (!data.empty()) {
    auto n = ::write(fd.get(), data.data(), data.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return sys_error("write", path, errno, file_errc(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
  if (::fchmod(fd.get(), mode & 07777) != 0) // O_CREAT's mode went through the umask
    return sys_error("chmod", path, errno);
  return {};
}

expected<std::string> read_in_root(int root, const std::string& path, size_t max_bytes) {
  auto parts = parse_sandbox_path(path, path_form::entry);
  if (!parts)
    return parts.err();
  sys::unique_fd fd{open_in_root(root, join(*parts, parts->size()),
                                 O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0)};
  if (!fd && errno == ENXIO)
    return invalid_argument("read " + path + ": not a regular file");
  if (!fd)
    return sys_error("open", path, errno, file_errc(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid_argument("read " + path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return too_large("read " + path + ": " + std::to_string(st.st_size) + " bytes, limit " +
                     std::to_string(max_bytes));
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::read(fd.get(), &out[got], out.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return sys_error("read", path, errno);
    if (n == 0)
      break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

} // namespace dsec::backends
