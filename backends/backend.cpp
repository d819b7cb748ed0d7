// What every backend checks before it makes a sandbox (see backend.hpp).
#include "backends/backend.hpp"

namespace dsec::backends {

status check_params(const create_params& p) {
  if (p.id.empty() || p.id.size() > 200 || p.id.find('/') != std::string::npos ||
      p.id == "." || p.id == "..")
    return invalid_argument("create: bad sandbox id \"" + p.id + "\"");
  if (p.dir.size() < 2 || p.dir[0] != '/')
    return invalid_argument("create " + p.id + ": dir must be an absolute path");
  if (p.lower_dirs.empty())
    return invalid_argument("create " + p.id + ": no layers");
  for (auto& l : p.lower_dirs)
    if (l.empty() || l[0] != '/' || l.find_first_of(",:\\") != std::string::npos)
      return invalid_argument("create " + p.id + ": bad layer dir \"" + l + "\"");
  return {};
}

} // namespace dsec::backends
