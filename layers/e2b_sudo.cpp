// E2B's sudo as a small layer on top of base/e2b@1 (e2b_sudo.hpp).
#include "layers/e2b_sudo.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "layers/e2b_base.hpp"
#include "layers/layer_file.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

status copy_executable(const std::string& from, const std::string& to) {
  auto data = sys::read_file(from);
  if (!data)
    return error{data.err().code, "read the sudo client " + from + ": " + data.err().message
                                      + " (is dsec-sudo built beside dsec? set DSEC_SUDO)"};
  return create_layer_file(to, *data, 0755);
}

} // namespace

status add_e2b_sudo(const std::string& dir, const std::string& sudo_binary) {
  for (auto d : {"/usr", "/usr/bin", "/etc", "/etc/dsec"})
    if (::mkdir((dir + d).c_str(), 0755) != 0 && errno != EEXIST)
      return sys_error("mkdir", dir + d, errno);
  if (auto st = copy_executable(sudo_binary, dir + "/usr/bin/sudo"); !st)
    return st;
  auto policy = dir + "/etc/dsec/sudo-users";
  return create_layer_file(policy, std::string{"# Users who may run any command as any user with "
                                         "dsec's sudo (no password).\n"} + e2b_user + "\n",
                     0644);
}

status build_e2b_sudo(store& s, const std::string& sudo_binary, log_fn log) {
  if (!log)
    log = [](const std::string&) {};
  auto found = s.resolve(e2b_sudo_ref);
  if (found) {
    log(std::string{"layer defaults: "} + e2b_sudo_ref + ": present (" + found->digest + "), skipped");
    return {};
  }
  if (found.err().code != errc::not_found)
    return found.err();
  const char* env = std::getenv("TMPDIR");
  std::string tmpl = std::string{env && *env ? env : "/var/tmp"} + "/dsec-layer-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error("create staging directory", tmpl, errno);
  auto tree = tmpl + "/rootfs";
  status st;
  if (::mkdir(tree.c_str(), 0755) != 0)
    st = sys_error("mkdir", tree, errno);
  if (st)
    st = add_e2b_sudo(tree, sudo_binary);
  if (st) {
    auto info = s.build(tree, e2b_sudo_name, e2b_sudo_version, "toolkit");
    if (info)
      log(std::string{"layer defaults: "} + e2b_sudo_ref + ": built " + info->digest);
    else
      st = info.err();
  }
  (void)sys::remove_tree(tmpl);
  if (!st)
    return error{st.err().code, std::string{"layer defaults "} + e2b_sudo_ref + ": " + st.err().message};
  return {};
}

} // namespace dsec::layers
