// What dsec's host-wide records (zram.hpp, swap_tier.hpp) share: an flock on
// a file under the run dir that serialises every change to a record, and a
// process identity (pid + start time) that tells a live user from a dead one
// whose pid was reused.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::sys {

/// Opens (creating it, and `dir` too) `dir`/`name` and holds an exclusive
/// flock on it until the returned descriptor closes. Blocking.
expected<unique_fd> lock_host_file(const std::string& dir, const std::string& name);

/// /proc/<pid>/stat field 22 (start time in ticks); -1 if the process is gone.
int64_t process_start_time(int64_t pid);

/// True while the process `pid` that started at `start_time` still lives.
inline bool process_alive(int64_t pid, int64_t start_time) {
  return pid > 0 && process_start_time(pid) == start_time;
}

/// A node using a host-wide record: its id and its process identity (pid +
/// start time tell it from a later process with the same pid).
struct host_user {
  std::string node;
  int64_t pid = 0;
  int64_t start_time = 0;
};

/// The record's line for `u`: "user NODE PID START\n".
inline std::string format_user_line(const host_user& u) {
  return "user " + u.node + " " + std::to_string(u.pid) + " " + std::to_string(u.start_time)
         + "\n";
}

/// Reads "NODE PID START" (the rest of a "user" line); false if malformed.
inline bool read_user_fields(std::istream& in, host_user& u) {
  return static_cast<bool>(in >> u.node >> u.pid >> u.start_time);
}

} // namespace dsec::sys
