// Putting the code interpreter into a layer tree (see code_interpreter.hpp).
#include "layers/code_interpreter.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::layers {

namespace {

/// Matplotlib's config and font cache, written once at layer build time.
constexpr const char* mpl_config_dir = "/var/cache/dsec-matplotlib";

} // namespace

layer_config code_interpreter_config() {
  layer_config c;
  c.start = {"/usr/bin/python3", std::string{code_interpreter_dir} + "/server.py"};
  c.env["MPLCONFIGDIR"] = mpl_config_dir;
  return c;
}

status add_code_interpreter(const std::string& dir) {
  for (auto& f : code_interpreter_files()) {
    auto path = dir + f.path;
    if (auto st = sys::make_dirs(path.substr(0, path.rfind('/'))); !st)
      return st;
    if (auto st = sys::write_file_atomic(path, f.text, 0644); !st)
      return st;
    if (::chmod(path.c_str(), 0644) != 0)
      return sys_error("chmod", path, errno);
  }
  auto cache = dir + mpl_config_dir;
  if (auto st = sys::make_dirs(cache); !st)
    return st;
  // The font cache is built on matplotlib's first import (seconds): do it now.
  auto res = sys::run_command({"chroot", dir, "/usr/bin/env", "-i", "HOME=/root",
                               std::string{"MPLCONFIGDIR="} + mpl_config_dir, "MPLBACKEND=Agg",
                               "/usr/bin/python3", "-c",
                               "import matplotlib.pyplot as p; p.figure(); import numpy"});
  if (!res)
    return error{res.err().code, "warm matplotlib cache: " + res.err().message};
  if (res->exit_code != 0)
    return internal_error("warm matplotlib cache in " + dir + ": python3 exited with "
                          + std::to_string(res->exit_code) + ": " + res->output.substr(0, 800));
  // World-writable like /tmp: a sandbox may run as another user.
  if (::chmod(cache.c_str(), 01777) != 0)
    return sys_error("chmod", cache, errno);
  return {};
}

} // namespace dsec::layers
