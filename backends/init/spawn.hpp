// The process of one exec request, started by dsec-init (see spawn.cpp).
// Failures inside the child follow the shell convention: a message on the
// command's stderr and exit code 127 (cwd or command missing) or 126 (not
// executable).
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
};

/// True once init lowered its own oom_score_adj; children then reset theirs
/// to 0 so the OOM killer prefers them over init.
extern bool oom_protected;

/// Starts the child; returns its pid (after it exec'd or failed), -1 with
/// errno on failure.
pid_t spawn(spawn_args& a);

} // namespace dsec::init
