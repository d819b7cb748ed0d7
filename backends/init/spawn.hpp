// The process of one exec request, started by dsec-init (see spawn.cpp).
// Failures inside the child follow the shell convention: a message on the
// command's stderr and exit code 127 (cwd or command missing) or 126 (not
// executable, or its user could not be taken on).
#pragma once

#include <sys/types.h>

namespace dsec::init {

/// What the child needs; prepared before the clone because the child shares
/// init's memory and must not allocate.
struct spawn_args {
  int in, out, err; ///< become the child's 0, 1, 2
  const char* cwd;
  char** argv;
  char** envp;
  /// Run as uid/gid with these supplementary groups (set before chdir and
  /// exec; init keeps CAP_SETUID/CAP_SETGID for this, see setup.cpp).
  bool set_ids = false;
  uid_t uid = 0;
  gid_t gid = 0;
  const gid_t* groups = nullptr;
  size_t ngroups = 0;
  /// Make `in` (a terminal) the controlling tty of the new session (pty.cpp).
  bool ctty = false;
};

/// True once init lowered its own oom_score_adj; children then reset theirs
/// to 0 so the OOM killer prefers them over init.
extern bool oom_protected;

/// Starts the child; returns its pid (after it exec'd or failed), -1 with
/// errno on failure.
pid_t spawn(spawn_args& a);

} // namespace dsec::init
