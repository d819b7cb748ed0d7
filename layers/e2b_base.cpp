// E2B's base template on a Debian tree (e2b_base.hpp): the user, its home,
// and pip opened to the system Python.
#include "layers/e2b_base.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "layers/store.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::layers {

status add_e2b_base(const std::string& dir) {
  // useradd from the tree itself, so the entries match its shadow suite;
  // SOURCE_DATE_EPOCH pins the shadow file's date of last change.
  auto uid = std::to_string(e2b_uid);
  auto res = sys::run_command({"chroot", dir, "/usr/bin/env", "-i",
                               std::string{"SOURCE_DATE_EPOCH="} + image_epoch,
                               "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "useradd", "--create-home",
                               "--uid", uid, "--user-group", "--shell", "/bin/bash", e2b_user});
  if (!res)
    return error{res.err().code, "add user " + std::string{e2b_user} + ": " + res.err().message};
  if (res->exit_code != 0)
    return internal_error("add user " + std::string{e2b_user} + " in " + dir
                          + ": useradd exited with " + std::to_string(res->exit_code) + ": "
                          + res->output.substr(0, 800));
  auto home = dir + e2b_home;
  struct stat st;
  if (::stat(home.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return sys_error("stat home of " + std::string{e2b_user}, home, errno);
  // A home others can read (E2B's is 0755): tools run as root find its files.
  if (::chmod(home.c_str(), 0755) != 0)
    return sys_error("chmod", home, errno);
  // /work belongs to the user, so E2B code that writes there keeps working.
  auto work = dir + "/work";
  if (::mkdir(work.c_str(), 0755) != 0 && errno != EEXIST)
    return sys_error("mkdir", work, errno);
  if (::chown(work.c_str(), e2b_uid, e2b_uid) != 0)
    return sys_error("chown", work, errno);
  // PEP 668: Debian refuses `pip install` into its Python; E2B's base allows it.
  auto marker = dir + "/usr/lib/python3.11/EXTERNALLY-MANAGED";
  if (::unlink(marker.c_str()) != 0 && errno != ENOENT)
    return sys_error("unlink", marker, errno);
  for (auto tool : {"/usr/bin/python", "/usr/bin/pip", "/usr/bin/git", "/usr/bin/curl",
                    "/usr/bin/wget"})
    if (!sys::exists(dir + tool))
      return internal_error("e2b base in " + dir + ": no " + std::string{tool + 1}
                            + " after debootstrap (did a Debian package change?)");
  return {};
}

} // namespace dsec::layers
