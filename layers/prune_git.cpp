// Git history pruning with the git CLI. The new repository is made beside the
// copy, borrows HEAD's tree through an alternates file, gets one commit
// object written from HEAD's raw commit minus its parents and signatures,
// then `repack -a -d` copies exactly the reachable objects in and the
// alternates file is dropped. It replaces the copy's `.git` at the end, so a
// failure leaves the copy (which is discarded anyway) never half-pruned.
#include "layers/prune_git.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dirent.h>

#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::layers {

namespace {

// The output's tail for an error message.
std::string tail(std::string s, size_t max = 500) {
  if (s.size() > max)
    s = "..." + s.substr(s.size() - max);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.pop_back();
  return s;
}

// Runs git with a clean environment: no system or global config (a user's
// commit.gpgSign, core.hooksPath or includes must not shape the result), no
// prompts, C locale; safe.directory=* because the copy keeps the source's
// owner, which may not be us. Returns the output (stdout+stderr) on exit 0.
expected<std::string> git(const std::string& repo, const std::vector<std::string>& args,
                          bool may_fail = false) {
  std::vector<std::string> argv = {
    "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent",
    "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C",
    "git", "-c", "safe.directory=*", "-c", "core.logAllRefUpdates=false",
    "-c", "gc.auto=0", "-c", "maintenance.auto=false"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto res = sys::run_command(argv);
  if (!res)
    return error{res.err().code, "prune git " + repo + ": " + res.err().message};
  if (res->exit_code != 0) {
    if (may_fail)
      return not_found("git exited " + std::to_string(res->exit_code));
    std::string cmd = "git";
    for (auto& a : args)
      cmd += " " + a;
    return internal_error("prune git " + repo + ": `" + cmd + "` exited "
                          + std::to_string(res->exit_code) + ": " + tail(res->output));
  }
  return res->output;
}

bool is_hex_id(const std::string& s) {
  return (s.size() == 40 || s.size() == 64)
         && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string absolute(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string{buf} : p;
}

// The git dir a work tree's `.git` entry names: the directory itself, or
// the target of a `gitdir: X` file (X relative to the work tree).
expected<std::string> git_dir_of(const std::string& worktree) {
  auto dot = worktree + "/.git";
  struct stat st;
  if (::lstat(dot.c_str(), &st) != 0)
    return sys_error("prune git: stat", dot, errno, errc::not_found);
  if (S_ISDIR(st.st_mode))
    return absolute(dot);
  if (!S_ISREG(st.st_mode))
    return invalid_argument("prune git: " + dot + " is neither a directory nor a gitdir file");
  auto text = sys::read_file(dot);
  if (!text)
    return text.err();
  auto t = trim(*text);
  if (t.compare(0, 8, "gitdir: ") != 0)
    return invalid_argument("prune git: " + dot + " is a file without a \"gitdir: \" line");
  auto target = t.substr(8);
  return absolute(target[0] == '/' ? target : worktree + "/" + target);
}

// HEAD's raw commit without parents or signatures: the new root commit.
// Everything else (tree, author, committer, encoding, message) is kept byte
// for byte, so the commit says what HEAD said.
std::string root_commit_of(const std::string& raw) {
  auto end = raw.find("\n\n");
  auto headers = raw.substr(0, end == std::string::npos ? raw.size() : end + 1);
  auto body = end == std::string::npos ? std::string{} : raw.substr(end + 1);
  std::string out;
  bool dropping = false;
  size_t i = 0;
  while (i < headers.size()) {
    auto nl = headers.find('\n', i);
    auto line = headers.substr(i, nl == std::string::npos ? std::string::npos : nl - i + 1);
    i = nl == std::string::npos ? headers.size() : nl + 1;
    if (!line.empty() && line[0] == ' ') { // continuation of the previous header
      if (!dropping)
        out += line;
      continue;
    }
    auto key = line.substr(0, line.find(' '));
    dropping = key == "parent" || key == "gpgsig" || key == "gpgsig-sha256" || key == "mergetag";
    if (!dropping)
      out += line;
  }
  return out + body;
}

status write_text_file(const std::string& path, const std::string& data) {
  return sys::write_file_atomic(path, data, 0644, sys::durability::process_crash);
}

} // namespace

status prune_repo(const std::string& worktree, const std::string& scratch) {
  auto gd = git_dir_of(worktree);
  if (!gd)
    return gd.err();
  auto g_old = [&](std::vector<std::string> args, bool may_fail = false) {
    args.insert(args.begin(), "--git-dir=" + *gd);
    return git(worktree, args, may_fail);
  };
  auto format = g_old({"rev-parse", "--show-object-format"});
  if (!format)
    return format.err();
  auto head = g_old({"rev-parse", "--verify", "-q", "HEAD^{commit}"}, true);
  auto branch = g_old({"symbolic-ref", "-q", "HEAD"}, true);

  // The new git dir, beside the copy on the same file system.
  std::string tmpl = scratch + "/git-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error("prune git: mkdtemp", tmpl, errno);
  auto fresh = tmpl + "/git";
  // --template= : no sample hooks, no description, nothing but the repo.
  if (auto r = git(worktree, {"init", "-q", "--bare", "--template=",
                              "--object-format=" + trim(*format), fresh}); !r)
    return r.err();
  auto g_new = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "--git-dir=" + fresh);
    return git(worktree, args);
  };
  if (auto r = g_new({"config", "core.bare", "false"}); !r)
    return r.err();
  if (auto r = g_new({"config", "core.logAllRefUpdates", "false"}); !r)
    return r.err();
  // HEAD first names the branch (still unborn), so every later command sees
  // the repository as it will be.
  std::string ref = branch ? trim(*branch) : "";
  if (!ref.empty())
    if (auto r = g_new({"symbolic-ref", "HEAD", ref}); !r)
      return r.err();
  if (head) {
    auto id = trim(*head);
    if (!is_hex_id(id))
      return internal_error("prune git " + worktree + ": HEAD resolved to \"" + tail(id) + "\"");
    auto objects = g_old({"rev-parse", "--git-path", "objects"});
    if (!objects)
      return objects.err();
    auto obj_dir = trim(*objects);
    if (obj_dir.empty() || obj_dir[0] != '/')
      obj_dir = *gd + "/" + obj_dir;
    if (auto st = sys::make_dirs(fresh + "/objects/info"); !st)
      return st;
    if (auto st = write_text_file(fresh + "/objects/info/alternates", obj_dir + "\n"); !st)
      return st;
    auto raw = g_old({"cat-file", "commit", id});
    if (!raw)
      return raw.err();
    auto commit_file = tmpl + "/commit";
    if (auto st = write_text_file(commit_file, root_commit_of(*raw)); !st)
      return st;
    auto made = g_new({"hash-object", "-t", "commit", "-w", commit_file});
    if (!made)
      return made.err();
    auto new_id = trim(*made);
    if (!is_hex_id(new_id))
      return internal_error("prune git " + worktree + ": hash-object said \"" + tail(new_id)
                            + "\"");
    if (!ref.empty()) {
      if (auto r = g_new({"update-ref", ref, new_id}); !r)
        return r.err();
    } else if (auto r = g_new({"update-ref", "--no-deref", "HEAD", new_id}); !r) {
      return r.err();
    }
    // Copy the reachable objects in (-a includes those borrowed through the
    // alternates), then stand alone and check nothing is missing.
    if (auto r = g_new({"repack", "-a", "-d", "-q"}); !r)
      return r.err();
    ::unlink((fresh + "/objects/info/alternates").c_str());
    if (auto r = g_new({"prune", "--expire=now"}); !r)
      return r.err();
    if (auto r = g_new({"fsck", "--connectivity-only", "--no-dangling", "--no-progress"}); !r)
      return error{r.err().code,
                   r.err().message + " (objects missing: a partial or shallow clone?)"};
  }
  // Keep the user's ignore rules (no history in them) so `git status` in the
  // sandbox is as quiet as on the host.
  if (auto excl = g_old({"rev-parse", "--git-path", "info/exclude"}, true)) {
    auto p = trim(*excl);
    if (!p.empty() && p[0] != '/')
      p = *gd + "/" + p;
    if (auto text = sys::read_file(p)) {
      (void)sys::make_dirs(fresh + "/info");
      (void)write_text_file(fresh + "/info/exclude", *text);
    }
  }
  // Swap it in, then rebuild the index from the new HEAD (the old index may
  // name objects that no longer exist).
  auto dot = worktree + "/.git";
  if (auto st = sys::remove_tree(dot); !st)
    return st;
  if (::rename(fresh.c_str(), dot.c_str()) != 0)
    return sys_error("prune git: rename", fresh + " -> " + dot, errno);
  (void)sys::remove_tree(tmpl);
  if (head)
    if (auto r = git(worktree,
                     {"--git-dir=" + dot, "--work-tree=" + worktree, "read-tree", "HEAD"});
        !r)
      return r.err();
  return {};
}

namespace {

void walk(const std::string& dir, int depth, std::vector<std::pair<int, std::string>>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::vector<std::string> subdirs;
  while (auto* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, ".."))
      continue;
    auto path = dir + "/" + e->d_name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0)
      continue;
    if (!std::strcmp(e->d_name, ".git")) {
      if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))
        out.emplace_back(depth, dir);
      continue; // never descend into a git dir
    }
    if (S_ISDIR(st.st_mode))
      subdirs.push_back(path);
  }
  ::closedir(d);
  for (auto& s : subdirs)
    walk(s, depth + 1, out);
}

} // namespace

std::vector<std::string> find_repos(const std::string& root) {
  std::vector<std::pair<int, std::string>> found;
  walk(root, 0, found);
  std::stable_sort(found.begin(), found.end(),
                   [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found)
    out.push_back(f.second);
  return out;
}

expected<pruned_build> build_pruned(store& s, const std::string& src_dir, const std::string& name,
                                    const std::string& version, const std::string& kind) {
  for (auto st : {validate_name(name), validate_version(version), validate_kind(kind)})
    if (!st)
      return st.err();
  auto what = "build layer " + name + "@" + version + " --prune-git";
  struct stat st;
  if (::stat(src_dir.c_str(), &st) != 0)
    return sys_error(what + ": source", src_dir, errno,
                     errno == ENOENT ? errc::not_found : errc::invalid_argument);
  if (!S_ISDIR(st.st_mode))
    return invalid_argument(what + ": source " + src_dir + " is not a directory");
  auto src = absolute(src_dir), root = absolute(s.root());
  if (root == src || root.compare(0, src.size() + 1, src + "/") == 0)
    return invalid_argument(what + ": source " + src_dir + " contains the layer store " + s.root());
  sys::scoped_tree staging; // under <store>/tmp, removed whatever happens
  std::string tmpl = s.root() + "/tmp/prune-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return sys_error(what + ": create staging dir", tmpl, errno);
  staging.path = tmpl;
  auto tree = staging.path + "/tree";
  if (::mkdir(tree.c_str(), 0755) != 0)
    return sys_error(what + ": mkdir", tree, errno);
  // cp -a keeps modes, owners, hardlinks, symlinks and xattrs.
  auto cp = sys::run_command({"cp", "-a", "--reflink=auto", "--", src + "/.", tree});
  if (!cp)
    return error{cp.err().code, what + ": copy: " + cp.err().message};
  if (cp->exit_code != 0)
    return internal_error(what + ": cp -a " + src + " " + tree + " exited "
                          + std::to_string(cp->exit_code) + ": " + tail(cp->output));
  pruned_build out;
  for (auto& repo : find_repos(tree)) {
    if (auto p = prune_repo(repo, staging.path); !p)
      return error{p.err().code, what + ": " + p.err().message};
    out.repos.push_back(repo == tree ? "." : repo.substr(tree.size() + 1));
  }
  auto info = s.build(tree, name, version, kind);
  if (!info)
    return info.err();
  out.info = *info;
  return out;
}

} // namespace dsec::layers
