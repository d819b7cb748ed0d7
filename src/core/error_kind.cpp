// Infra vs model errors (see error_kind.hpp).
#include "core/error_kind.hpp"

namespace dsec {

bool is_infra(const error& err) {
  switch (err.code) {
    case errc::none:
    case errc::invalid_argument:
    case errc::too_large:
    case errc::not_found:
    case errc::conflict: return false;
    case errc::unavailable:
      // The sandbox actor names a failed or stopped sandbox's reason in
      // parentheses ("sandbox n1.x is failed (oom)"): the agent's own limit
      // or the spec's TTL or idle policy, not the platform; so is a call on
      // a paused sandbox whose spec turned auto_resume off.
      return err.message.find("(oom)") == std::string::npos
             && err.message.find("ttl expired") == std::string::npos
             && err.message.find("idle timeout") == std::string::npos
             && err.message.find("(its auto_resume is false)") == std::string::npos;
    case errc::resource_exhausted:
    case errc::timeout:
    case errc::internal: return true;
  }
  return true;
}

} // namespace dsec
