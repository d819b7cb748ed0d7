// Building the default layers: a busybox tree assembled file by file, a
// Debian tree from debootstrap trimmed of apt caches and logs, each staged in
// a private temp directory on local disk (not in the store, which may be a
// network file system) and removed afterwards.
#include "layers/defaults.hpp"

#include <dirent.h>
#include <glob.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <sstream>
#include <vector>

#include "layers/code_interpreter.hpp"
#include "layers/e2b_base.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::layers {

namespace {

constexpr const char* fallback_mirror = "http://deb.debian.org/debian";
constexpr const char* suite = "bookworm";

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

bool has_word(const std::string& s, const std::string& w) {
  for (auto& x : words(s))
    if (x == w)
      return true;
  return false;
}

std::string strip_slash(std::string uri) {
  while (!uri.empty() && uri.back() == '/')
    uri.pop_back();
  return uri;
}

// The mirror of the first deb822 stanza for `suite`, or empty.
std::string mirror_from_deb822(const std::string& text) {
  std::istringstream in(text + "\n\n");
  std::string line, types, uris, suites, enabled;
  while (std::getline(in, line)) {
    auto t = trim(line);
    if (t.empty()) {
      if (has_word(types, "deb") && has_word(suites, suite) && enabled != "no" && !uris.empty())
        return strip_slash(words(uris).front());
      types = uris = suites = enabled = "";
      continue;
    }
    if (t[0] == '#' || line[0] == ' ' || line[0] == '\t')
      continue;
    auto colon = t.find(':');
    if (colon == std::string::npos)
      continue;
    auto key = t.substr(0, colon);
    auto value = trim(t.substr(colon + 1));
    if (key == "Types")
      types = value;
    else if (key == "URIs")
      uris = value;
    else if (key == "Suites")
      suites = value;
    else if (key == "Enabled")
      enabled = value;
  }
  return {};
}

// The mirror of the first one-line `deb [opts] URI bookworm ...` entry, or empty.
std::string mirror_from_list(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto w = words(line.substr(0, line.find('#')));
    if (w.empty() || w[0] != "deb")
      continue;
    size_t i = 1;
    if (i < w.size() && w[i].front() == '[') { // options: "[arch=amd64 signed-by=...]"
      while (i < w.size() && w[i].back() != ']')
        ++i;
      ++i;
    }
    if (i + 1 < w.size() && w[i + 1] == suite)
      return strip_slash(w[i]);
  }
  return {};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return sys_error("mkdir", path, errno);
  // mkdir applies the umask; the image must not depend on the builder's.
  if (::chmod(path.c_str(), mode) != 0)
    return sys_error("chmod", path, errno);
  return {};
}

status write_file(const std::string& path, const std::string& data, mode_t mode) {
  if (auto st = sys::write_file_atomic(path, data, mode); !st)
    return st;
  if (::chmod(path.c_str(), mode) != 0)
    return sys_error("chmod", path, errno);
  return {};
}

// Where an applet at `rel` (e.g. "usr/bin/env") finds bin/busybox, relatively.
std::string applet_target(const std::string& rel) {
  auto depth = static_cast<size_t>(std::count(rel.begin(), rel.end(), '/'));
  if (rel.compare(0, 4, "bin/") == 0 && depth == 1)
    return "busybox";
  std::string up;
  for (size_t i = 0; i < depth; ++i)
    up += "../";
  return up + "bin/busybox";
}

status link_applets(const std::string& busybox, const std::string& dir) {
  auto res = sys::run_command({busybox, "--list-full"});
  if (!res)
    return res.err();
  if (res->exit_code != 0)
    return internal_error("list applets: " + busybox + " --list-full exited with "
                          + std::to_string(res->exit_code));
  std::istringstream in(res->output);
  for (std::string rel; std::getline(in, rel);) {
    rel = trim(rel);
    if (rel.empty() || rel == "bin/busybox" || rel[0] == '/' || rel.find("..") != std::string::npos)
      continue;
    auto slash = rel.rfind('/');
    if (slash != std::string::npos)
      if (auto st = sys::make_dirs(dir + "/" + rel.substr(0, slash)); !st)
        return st;
    auto path = dir + "/" + rel;
    if (::symlink(applet_target(rel).c_str(), path.c_str()) != 0 && errno != EEXIST)
      return sys_error("symlink applet", path, errno);
  }
  return {};
}

// Removes the regular files and symlinks below `dir` (recursively), keeping
// the directories: apt and dpkg expect them to exist.
void remove_files_below(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    auto path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0)
      continue;
    if (S_ISDIR(st.st_mode))
      remove_files_below(path);
    else
      ::unlink(path.c_str());
  }
  ::closedir(d);
}

void remove_glob(const std::string& pattern) {
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      ::unlink(g.gl_pathv[i]);
  ::globfree(&g);
}

// Drops what debootstrap leaves that a sandbox does not need or that differs
// between runs: downloaded debs, apt indexes (run `apt-get update` first inside
// a sandbox), logs, backup files, the host's hostname and resolv.conf.
void trim_debian_rootfs(const std::string& root) {
  remove_files_below(root + "/var/cache/apt");
  remove_files_below(root + "/var/lib/apt/lists");
  remove_files_below(root + "/var/log");
  for (auto pattern : {"/var/lib/dpkg/*-old", "/var/cache/debconf/*-old",
                       "/var/cache/ldconfig/aux-cache", "/etc/hostname", "/etc/resolv.conf"})
    remove_glob(root + pattern);
}

// A bookworm minbase with `include` (comma-separated Debian packages).
status make_debian_rootfs(const std::string& dir, const std::string& ref,
                          const std::string& include, const log_fn& log) {
  auto mirror = find_debian_mirror();
  log("layer defaults: " + ref + ": debootstrap " + std::string{suite} + " from " + mirror
      + " (takes a minute or two)");
  auto res = sys::run_command({"env", std::string{"SOURCE_DATE_EPOCH="} + image_epoch,
                               "debootstrap", "--variant=minbase", "--include=" + include, suite,
                               dir, mirror});
  if (!res)
    return error{res.err().code, "debootstrap: " + res.err().message};
  if (res->exit_code != 0) {
    auto out = res->output.size() > 800 ? "..." + res->output.substr(res->output.size() - 800)
                                        : res->output;
    return internal_error("debootstrap " + std::string{suite} + " into " + dir + " from " + mirror
                          + " exited with " + std::to_string(res->exit_code) + ": " + out);
  }
  if (!sys::exists(dir + "/usr/bin/python3.11"))
    return internal_error("debootstrap into " + dir + ": no usr/bin/python3.11 (did bookworm's"
                          " python3 change version?)");
  trim_debian_rootfs(dir);
  return make_dir(dir + "/work", 0755);
}

// A private staging directory on local disk, removed on destruction.
class staging_dir {
 public:
  static expected<staging_dir> create() {
    const char* env = std::getenv("TMPDIR");
    std::string base = env && *env ? env : "/var/tmp";
    sweep_stale(base);
    std::string tmpl = base + "/dsec-layer-XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      return sys_error("create staging directory", tmpl, errno);
    return staging_dir{tmpl};
  }
  staging_dir(staging_dir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  staging_dir& operator=(staging_dir&&) = delete;
  ~staging_dir() {
    if (path_.empty())
      return;
    sys::unmount_below(path_); // debootstrap's /proc if it failed half-way
    (void)sys::remove_tree(path_);
  }
  const std::string& path() const { return path_; }

 private:
  explicit staging_dir(std::string p) : path_(std::move(p)) {}

  /// Staging dirs older than a day belong to a build that was killed (a
  /// running debootstrap touches its tree far more often): unmount, remove.
  static void sweep_stale(const std::string& base) {
    DIR* d = ::opendir(base.c_str());
    if (!d)
      return;
    auto now = ::time(nullptr);
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      struct stat st;
      auto path = base + "/" + name;
      if (name.rfind("dsec-layer-", 0) != 0 || ::lstat(path.c_str(), &st) != 0
          || !S_ISDIR(st.st_mode) || now - st.st_mtime < 24 * 3600)
        continue;
      sys::unmount_below(path);
      (void)sys::remove_tree(path);
    }
    ::closedir(d);
  }

  std::string path_;
};

using tree_maker = std::function<status(const std::string& dir)>;

status build_one(store& s, const std::string& name, const std::string& version,
                 const tree_maker& make, const log_fn& log,
                 const store::build_options& opts = {}) {
  auto ref = name + "@" + version;
  auto found = s.resolve(ref);
  if (found) {
    log("layer defaults: " + ref + ": present (" + found->digest + "), skipped");
    return {};
  }
  if (found.err().code != errc::not_found)
    return found.err();
  auto t0 = std::chrono::steady_clock::now();
  auto stage = staging_dir::create();
  if (!stage)
    return error{stage.err().code, "layer defaults " + ref + ": " + stage.err().message};
  auto tree = stage->path() + "/rootfs";
  if (auto st = make_dir(tree, 0755); !st)
    return error{st.err().code, "layer defaults " + ref + ": " + st.err().message};
  if (auto st = make(tree); !st)
    return error{st.err().code, "layer defaults " + ref + ": " + st.err().message};
  auto t1 = std::chrono::steady_clock::now();
  auto info = s.build(tree, name, version, "base", opts);
  if (!info)
    return info.err();
  char size[32];
  std::snprintf(size, sizeof(size), "%.1f MiB", static_cast<double>(info->size_bytes) / (1 << 20));
  log("layer defaults: " + ref + ": built " + info->digest + " (" + size + ") in "
      + format_seconds(seconds_since(t0)) + " (tree " + format_seconds(
          std::chrono::duration<double>(t1 - t0).count()) + ", image "
      + format_seconds(seconds_since(t1)) + ")");
  return {};
}

} // namespace

std::string pick_debian_mirror(const std::string& sources_d, const std::string& sources_list) {
  if (auto m = mirror_from_deb822(sources_d); !m.empty())
    return m;
  if (auto m = mirror_from_list(sources_list); !m.empty())
    return m;
  return fallback_mirror;
}

std::string find_debian_mirror() {
  std::string deb822;
  glob_t g{};
  if (::glob("/etc/apt/sources.list.d/*.sources", 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i)
      if (auto text = sys::read_file(g.gl_pathv[i]))
        deb822 += *text + "\n\n";
  ::globfree(&g);
  auto list = sys::read_file("/etc/apt/sources.list");
  return pick_debian_mirror(deb822, list ? *list : std::string{});
}

status make_busybox_rootfs(const std::string& busybox, const std::string& dir) {
  auto bin = sys::read_file(busybox);
  if (!bin)
    return bin.err();
  for (auto [sub, mode] : {std::pair{"bin", 0755}, {"etc", 0755}, {"tmp", 01777}, {"root", 0700},
                           {"proc", 0555}, {"sys", 0555}, {"dev", 0755}, {"work", 0755}})
    if (auto st = make_dir(dir + "/" + sub, static_cast<mode_t>(mode)); !st)
      return st;
  if (auto st = write_file(dir + "/bin/busybox", *bin, 0755); !st)
    return st;
  if (auto st = link_applets(dir + "/bin/busybox", dir); !st)
    return st;
  if (auto st = write_file(dir + "/etc/passwd",
                           "root:x:0:0:root:/root:/bin/sh\n"
                           "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0644); !st)
    return st;
  return write_file(dir + "/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0644);
}

status build_defaults(store& s, log_fn log) {
  if (!log)
    log = [](const std::string&) {};
  auto busybox = [](const std::string& dir) { return make_busybox_rootfs("/bin/busybox", dir); };
  if (auto st = build_one(s, "base/busybox", "1", busybox, log); !st)
    return st;
  auto python = [&log](const std::string& dir) {
    return make_debian_rootfs(dir, "base/python@3.11", "python3", log);
  };
  if (auto st = build_one(s, "base/python", "3.11", python, log); !st)
    return st;
  // issue 26: the code interpreter's server (layers/code_interpreter.hpp).
  auto interp = [&log](const std::string& dir) {
    if (auto st = make_debian_rootfs(dir, code_interpreter_ref, code_interpreter_packages, log); !st)
      return st;
    return add_code_interpreter(dir);
  };
  store::build_options opts;
  opts.config = code_interpreter_config();
  return build_one(s, "base/code-interpreter", "1", interp, log, opts);
}

// issue 27: E2B's base template (layers/e2b_base.hpp).
status build_e2b_base(store& s, log_fn log) {
  if (!log)
    log = [](const std::string&) {};
  auto e2b = [&log](const std::string& dir) {
    if (auto st = make_debian_rootfs(dir, e2b_base_ref, e2b_base_packages, log); !st)
      return st;
    return add_e2b_base(dir);
  };
  return build_one(s, e2b_base_name, e2b_base_version, e2b, log);
}

} // namespace dsec::layers
