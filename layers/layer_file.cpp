// One new file of a layer being built (see layer_file.hpp).
#include "layers/layer_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "sys/fd.hpp"

namespace dsec::layers {

status create_layer_file(const std::string& path, std::string_view data, mode_t mode, uid_t uid,
                         gid_t gid) {
  sys::unique_fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!fd)
    return sys_error("create", path, errno);
  size_t off = 0;
  while (off < data.size()) {
    auto n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return sys_error("write", path, errno);
    off += size_t(n);
  }
  if ((uid != uid_t(-1) || gid != gid_t(-1)) && ::fchown(fd.get(), uid, gid) != 0)
    return sys_error("chown", path, errno);
  if (::fchmod(fd.get(), mode) != 0)
    return sys_error("chmod", path, errno);
  return {};
}

} // namespace dsec::layers
