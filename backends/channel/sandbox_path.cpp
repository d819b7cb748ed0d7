// The checks and error codes every file call shares (see sandbox_path.hpp).
#include "backends/channel/sandbox_path.hpp"

#include <cerrno>

namespace dsec::backends {

errc file_errc(int err) {
  switch (err) {
  case ENOENT: return errc::not_found;
  case ENOTDIR:
  case EISDIR:
  case ELOOP:
  case EXDEV:
  case ENAMETOOLONG:
  case ENXIO: // a socket or a FIFO the agent planted: not a file to move
    return errc::invalid_argument;
  case ETXTBSY: // a binary the sandbox is running right now
    return errc::conflict;
  case EFBIG: return errc::too_large;
  case ENOSPC:
  case EDQUOT: return errc::resource_exhausted;
  default: return errc::internal;
  }
}

expected<std::vector<std::string>> split_sandbox_path(const std::string& path) {
  if (path.empty() || path[0] != '/')
    return invalid_argument("path " + path + ": must be absolute");
  if (path.find('\0') != std::string::npos)
    return invalid_argument("path: contains a NUL byte");
  std::vector<std::string> parts;
  size_t i = 1;
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string::npos)
      j = path.size();
    auto c = path.substr(i, j - i);
    if (c == "..")
      return invalid_argument("path " + path + ": \"..\" is not allowed");
    if (!c.empty() && c != ".")
      parts.push_back(c);
    i = j + 1;
  }
  if (parts.empty())
    return invalid_argument("path " + path + ": names the root directory");
  return parts;
}

} // namespace dsec::backends
