// E2B's user as a layer over one that lacks it (e2b_user_layer.hpp).
#include "layers/e2b_user_layer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "layers/code_interpreter.hpp"
#include "layers/e2b_base.hpp"
#include "layers/layer_file.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

/// Writes `data` to a new file `path` with the mode and owner of `like`.
status write_like(const std::string& path, const std::string& data, const struct stat& like) {
  return create_layer_file(path, data, like.st_mode & 07777, like.st_uid, like.st_gid);
}

bool has_entry(const std::string& text, const std::string& name, const std::string& id) {
  size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    auto line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (line.rfind(name + ":", 0) == 0)
      return true;
    auto c1 = line.find(':');
    auto c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    auto c3 = c2 == std::string::npos ? c2 : line.find(':', c2 + 1);
    if (!id.empty() && c3 != std::string::npos && line.substr(c2 + 1, c3 - c2 - 1) == id)
      return true;
  }
  return false;
}

std::string with_line(std::string text, const std::string& line) {
  if (!text.empty() && text.back() != '\n')
    text.push_back('\n');
  return text + line + "\n";
}

} // namespace

status add_user_over(const std::string& lower, const std::string& dir) {
  const std::string name = e2b_user, id = std::to_string(e2b_uid);
  // 2024-01-01 (image_epoch) in days: the shadow "last change" field.
  const std::string day = std::to_string(std::stoll(image_epoch) / 86400);
  const std::string shell = sys::exists(lower + "/bin/bash") ? "/bin/bash" : "/bin/sh";
  struct entry { const char* file; std::string line; const char* id_of; };
  const entry entries[] = {
    {"passwd", name + ":x:" + id + ":" + id + "::" + e2b_home + ":" + shell, "uid"},
    {"group", name + ":x:" + id + ":", "gid"},
    {"shadow", name + ":!:" + day + ":0:99999:7:::", nullptr},
    {"gshadow", name + ":!::", nullptr},
  };
  for (auto d : {"/etc", "/home"})
    if (::mkdir((dir + d).c_str(), 0755) != 0)
      return sys_error("mkdir", dir + d, errno);
  for (auto& e : entries) {
    auto src = lower + "/etc/" + e.file;
    struct stat st {};
    if (::stat(src.c_str(), &st) != 0)
      return sys_error("stat the lower layer's", src, errno);
    auto text = sys::read_file(src);
    if (!text)
      return text.err();
    if (has_entry(*text, name, e.id_of ? id : std::string{}))
      return invalid_argument("add user " + name + ": the lower layer's /etc/" + e.file
                              + " already has the name or id " + id);
    if (auto s = write_like(dir + "/etc/" + e.file, with_line(*text, e.line), st); !s)
      return s;
  }
  auto home = dir + e2b_home;
  if (::mkdir(home.c_str(), 0755) != 0 || ::chown(home.c_str(), e2b_uid, e2b_uid) != 0)
    return sys_error("mkdir", home, errno);
  // The skeleton files useradd would copy (dotfiles, regular files only).
  auto skel = lower + "/etc/skel";
  if (DIR* d = ::opendir(skel.c_str())) {
    status st;
    while (auto* e = ::readdir(d)) {
      std::string f = e->d_name;
      struct stat fs {};
      if (f == "." || f == ".." || ::lstat((skel + "/" + f).c_str(), &fs) != 0 || !S_ISREG(fs.st_mode))
        continue;
      auto text = sys::read_file(skel + "/" + f);
      if (!text) {
        st = text.err();
        break;
      }
      fs.st_uid = e2b_uid;
      fs.st_gid = e2b_uid;
      if (st = write_like(home + "/" + f, *text, fs); !st)
        break;
    }
    ::closedir(d);
    if (!st)
      return st;
  }
  return {};
}

status build_code_interpreter_user(store& s, log_fn log) {
  if (!log)
    log = [](const std::string&) {};
  const std::string ref = code_interpreter_user_ref;
  auto found = s.resolve(ref);
  if (found) {
    log("layer defaults: " + ref + ": present (" + found->digest + "), skipped");
    return {};
  }
  if (found.err().code != errc::not_found)
    return found.err();
  auto lower = s.resolve(code_interpreter_ref);
  if (!lower)
    return error{lower.err().code, "layer defaults " + ref + ": " + lower.err().message};
  const char* env = std::getenv("TMPDIR");
  std::string stage = std::string{env && *env ? env : "/var/tmp"} + "/dsec-layer-XXXXXX";
  if (!::mkdtemp(stage.data()))
    return sys_error("create staging directory", stage, errno);
  auto mnt = stage + "/lower", tree = stage + "/rootfs";
  status st;
  bool mounted = false;
  if (::mkdir(mnt.c_str(), 0700) != 0 || ::mkdir(tree.c_str(), 0755) != 0)
    st = sys_error("mkdir", stage, errno);
  // SAFETY: a read-only, nodev, nosuid, noexec mount of a layer image the
  // store built, on a directory of our own staging dir, unmounted below
  // before the dir is removed.
  if (st) {
    auto blob = s.blob_path(lower->digest);
    if (::mount(blob.c_str(), mnt.c_str(), "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID | MS_NOEXEC,
                nullptr) != 0)
      st = sys_error("mount erofs " + blob + " on", mnt, errno);
    else
      mounted = true;
  }
  if (st)
    st = add_user_over(mnt, tree);
  if (mounted && ::umount2(mnt.c_str(), MNT_DETACH) != 0 && st)
    st = sys_error("umount", mnt, errno);
  if (st) {
    auto info = s.build(tree, code_interpreter_user_name, code_interpreter_user_version, "toolkit");
    if (info)
      log("layer defaults: " + ref + ": built " + info->digest + " over " + lower->digest);
    else
      st = info.err();
  }
  (void)sys::remove_tree(stage);
  if (!st)
    return error{st.err().code, "layer defaults " + ref + ": " + st.err().message};
  return {};
}

} // namespace dsec::layers
