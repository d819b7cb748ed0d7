// The error codes every file call shares (see sandbox_path.hpp).
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

} // namespace dsec::backends
