// E2B's file metadata inside a container sandbox (envd 0.6.2): a file's
// `user.e2b.<key>` extended attributes, read into every entry the filesystem
// calls answer and replaced as a whole by an upload that carries metadata.
// The node reaches a file only through an O_PATH fd resolved in-root
// (fs_ops.cpp), and the xattr calls go through that fd's /proc/self/fd link,
// so they act on the very inode the lookup found, never on a path an agent
// could swap. Symlinks carry none (Linux has no user xattrs on them).
#include "backends/container/fs_metadata.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backends/channel/sandbox_path.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

namespace {

/// Most bytes of one xattr value read back (E2B's values are header values).
constexpr size_t max_value_bytes = 64 * 1024;

std::string fd_link(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

/// The names of every xattr of `link`, or empty when it has none or the
/// filesystem keeps none.
std::vector<std::string> xattr_names(const std::string& link) {
  std::vector<std::string> out;
  auto size = ::listxattr(link.c_str(), nullptr, 0);
  if (size <= 0)
    return out;
  std::string buf(static_cast<size_t>(size), '\0');
  size = ::listxattr(link.c_str(), buf.data(), buf.size());
  if (size <= 0)
    return out;
  for (size_t pos = 0; pos < static_cast<size_t>(size);) {
    auto len = std::strlen(buf.data() + pos);
    out.emplace_back(buf.data() + pos, len);
    pos += len + 1;
  }
  return out;
}

bool has_prefix(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0 && s.size() > std::strlen(prefix);
}

} // namespace

std::map<std::string, std::string> read_metadata(int fd) {
  std::map<std::string, std::string> out;
  auto link = fd_link(fd);
  auto prefix_len = std::strlen(metadata_xattr_prefix);
  for (auto& name : xattr_names(link)) {
    if (!has_prefix(name, metadata_xattr_prefix))
      continue;
    std::string value(max_value_bytes, '\0');
    auto n = ::getxattr(link.c_str(), name.c_str(), value.data(), value.size());
    if (n < 0)
      continue; // gone between the list and the read, or too large: not shown
    value.resize(static_cast<size_t>(n));
    out[name.substr(prefix_len)] = std::move(value);
  }
  return out;
}

std::map<std::string, std::string> read_metadata_at(int dir, const std::string& name,
                                                    mode_t mode) {
  if (!S_ISREG(mode) && !S_ISDIR(mode))
    return {};
  if (name.empty())
    return read_metadata(dir);
  // A single name below a parent resolved in-root, never followed.
  sys::unique_fd fd{::openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC)};
  if (!fd)
    return {};
  return read_metadata(fd.get());
}

status replace_metadata(int fd, const std::string& path,
                        const std::map<std::string, std::string>& metadata) {
  auto link = fd_link(fd);
  for (auto& name : xattr_names(link))
    if (has_prefix(name, metadata_xattr_prefix)
        && ::removexattr(link.c_str(), name.c_str()) != 0 && errno != ENODATA)
      return sys_error("removexattr " + name, path, errno, file_errc(errno));
  for (auto& [key, value] : metadata) {
    auto name = metadata_xattr_prefix + key;
    if (::setxattr(link.c_str(), name.c_str(), value.data(), value.size(), 0) != 0) {
      if (errno == ENOTSUP)
        return invalid_argument("file metadata of " + path
                           + ": the sandbox's filesystem keeps no user extended attributes");
      return sys_error("setxattr " + name, path, errno, file_errc(errno));
    }
  }
  return {};
}

} // namespace dsec::backends
