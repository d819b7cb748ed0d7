// Starting peer runtimes (crun, bwrap) from the bench: fork + exec with the
// output wired to a pipe (to time the first byte), a memfd (to read after
// exit without holding a pipe open for a detached container), or /dev/null;
// optionally entering a saved mount namespace first (one setns(2) in the
// child), which is how crun runs with this machine's cgroup layout.
//
// Every descriptor the bench opens is close-on-exec and the child closes all
// descriptors above 2, because burst threads fork concurrently and a leaked
// pipe end would keep another trial's pipe from ever reaching EOF.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::bench {

/// Where a child's stdout and stderr go (both to the same place).
enum class output_mode { pipe, memfd, null };

/// A started child: its pid and the read side of its output (pipe or memfd).
struct child_process {
  pid_t pid = -1;
  sys::unique_fd out;
};

/// What a finished child left.
struct run_result {
  int exit_code = 0; // 128 + signal if killed
  std::string output;
};

/// Absolute path of `name` found in PATH, or "" if absent.
std::string find_exe(const std::string& name);

/// Forks and execs argv[0] (an absolute path) with stdin from /dev/null.
/// With `mntns_fd` >= 0 the child first joins that mount namespace.
expected<child_process> spawn(const std::vector<std::string>& argv, output_mode mode,
                              int mntns_fd = -1);

/// Waits for `pid`; returns its exit code or 128 + signal.
int wait_child(pid_t pid);

/// Reads a pipe until EOF (output capped at 1 MiB).
std::string read_all(int fd);

/// Reads a whole memfd from offset 0.
std::string read_memfd(int fd);

/// Runs argv to completion with output in a memfd (safe for detached children).
expected<run_result> run(const std::vector<std::string>& argv, int mntns_fd = -1);

/// Creates a private mount namespace in which `empty_file` is bind-mounted
/// over `target` (crun's trick for this machine) and returns an fd that keeps
/// it alive for setns(2). The helper process that built it has exited. If
/// `target` does not exist, the namespace is made without the bind mount.
expected<sys::unique_fd> make_patched_mount_ns(const std::string& empty_file,
                                               const std::string& target);

} // namespace dsec::bench
