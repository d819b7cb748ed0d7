// Pruning git history out of a workspace before it becomes a layer (the
// answer-leak defence of `dsec layer build --prune-git`).
//
// A SWE-style task ships a repository checked out at the commit to fix. An
// agent that runs `git log --all`, reads a tag, a remote-tracking branch, a
// reflog, a stash, ORIG_HEAD or an unreachable object, or simply fetches the
// remote, can read the upstream fix instead of writing it. Pruning rewrites
// every repository found in the tree IN A STAGING COPY (the user's directory
// is never written) so that it holds exactly one commit: HEAD's tree as a new
// root commit with HEAD's author, committer, dates and message, on the same
// branch name (or a detached HEAD if HEAD was detached). Nothing else
// survives: no other branches, tags, remotes or config from the old repo, no
// reflogs, stash, packed-refs, hooks, ORIG_HEAD or FETCH_HEAD, and no object
// that commit does not reach. The working-tree files stay byte for byte as in
// the source; the index is rebuilt from HEAD (uncommitted edits show as
// unstaged changes, files only `git add`ed show as untracked).
//
// Repositories are found by their `.git` entry: a directory, or a file
// (`gitdir: ...`, submodules and linked worktrees) whose history is read from
// where it points and which becomes a standalone `.git` directory. Bare
// repositories elsewhere in the tree are not detected (see the report).
//
// Uses the git CLI (`git` must be on PATH) with system and global config
// ignored, so a user's config (signing, hooks paths) cannot change the result.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "layers/store.hpp"

namespace dsec::layers {

/// Rewrites the repository whose work tree is `worktree` (it has a `.git`
/// entry) in place, as described above. `scratch` is an existing empty-ish
/// directory on the same file system for temporary files. Fails naming the
/// repository, the git command and its output.
status prune_repo(const std::string& worktree, const std::string& scratch);

/// Every directory below `root` (itself included) that has a `.git` entry,
/// deepest first (so a submodule is pruned before the repository that holds
/// its git dir). Does not descend into `.git` directories or follow symlinks.
std::vector<std::string> find_repos(const std::string& root);

/// What build_pruned did.
struct pruned_build {
  layer_info info;
  /// The repositories pruned, relative to the source ("." for its top).
  std::vector<std::string> repos;
};

/// Copies `src_dir` into <store>/tmp/, prunes every repository in the copy
/// and builds the layer from the copy with store::build. The copy is removed
/// on success and on failure; `src_dir` is only read.
expected<pruned_build> build_pruned(store& s, const std::string& src_dir, const std::string& name,
                                    const std::string& version, const std::string& kind);

} // namespace dsec::layers
