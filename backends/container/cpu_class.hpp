// CPU classes (DESIGN.md §6): a `batch` sandbox runs every task under
// SCHED_IDLE in a cpu cgroup of minimum weight that the kernel treats as an
// idle group (cpu.idle = 1, Linux 5.15+), so that `latency` sandboxes on the
// same cores preempt it at once and get nearly all the CPU they want; a
// `latency` one runs SCHED_OTHER with the default weight. Two mechanisms,
// because each covers what the other misses: the group knobs decide between
// sandboxes (each has its own cpu cgroup), the task policy decides against
// everything else on the node (its own threads, other cgroups) and is
// inherited by whatever the sandbox forks later. Used by the container
// backend (its cgroup) and the VM backends (QEMU's threads).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "sys/cgroup.hpp"

namespace dsec::backends {

/// What one class means for the kernel.
struct cpu_class_params {
  /// cpu.shares of the sandbox's group: 2 is the v1 minimum (a batch group
  /// loses to any other), 1024 the kernel's default.
  int64_t shares = 1024;
  /// cpu.idle of the group.
  bool idle = false;
  /// Scheduling policy of every task: SCHED_IDLE or SCHED_OTHER.
  int policy = 0;
};

/// The parameters of "latency" or "batch"; invalid_argument for any other.
expected<cpu_class_params> cpu_class_params_of(const std::string& cls);

/// Task ids in the text of a cgroup `tasks` / `cgroup.procs` file (one
/// decimal per line; anything else ends the list).
std::vector<pid_t> parse_task_ids(std::string_view text);

/// The v1 cpu controller's directory of `cg` (the path with "/cpu/" in it),
/// empty if it has none.
std::string cpu_dir_of(const sys::cgroup& cg);

/// Writes cpu.shares and cpu.idle of the group at `cpu_dir` (cpu.idle only
/// where the kernel has it). Order matters: the kernel refuses shares on an
/// idle group and resets them to 1024 when it stops being idle.
status apply_cpu_knobs(const std::string& cpu_dir, const cpu_class_params& p);

/// Sets the policy of every task listed in `cpu_dir`/tasks (threads
/// included), re-reading the list until a pass finds no task it had not
/// set: a task forking meanwhile has its child set too. Tasks that exit
/// meanwhile are skipped.
status apply_cpu_policy(const std::string& cpu_dir, const cpu_class_params& p);

/// The same for every thread of process `pid` (/proc/<pid>/task/*), for a
/// process with no cgroup of its own (QEMU).
status apply_cpu_policy_to_process(pid_t pid, const cpu_class_params& p);

/// Knobs, then tasks, of the group at `cpu_dir`, to class `cls`. Blocking
/// (a few small file writes and one syscall per task).
status apply_cpu_class(const std::string& cpu_dir, const std::string& cls);

/// The node process's place in the cpu hierarchy: <root>/cpu/dsec/<node>/_node,
/// beside its sandboxes. An idle group is idle only among its siblings: from
/// the root, dsec/<node> is one entity of the default weight, which the
/// node's threads there do not preempt at once however idle its runnable
/// children are (measured: +35-45% on a latency exec's round trip next to
/// batch hogs, the in-sandbox part +6%). Beside the sandboxes they preempt
/// batch tasks at once. Only the cpu controller; leave() (or the destructor)
/// moves the process back where it was and removes the directory, before the
/// node removes dsec/<node>.
class node_cpu_placement {
 public:
  /// Moves the whole process (every thread) there; on failure it stays
  /// where it is and error() says why (a node runs either way).
  node_cpu_placement(const std::string& cgroup_root, const std::string& node_id);
  ~node_cpu_placement() { leave(); }
  node_cpu_placement(const node_cpu_placement&) = delete;
  node_cpu_placement& operator=(const node_cpu_placement&) = delete;

  /// Idempotent.
  void leave();
  const error& err() const { return err_; }

  /// The directory's name under dsec/<node> (tests skip it).
  static constexpr const char* dir_name = "_node";

 private:
  std::string dir_;  ///< empty unless joined
  std::string back_; ///< the cpu group it came from
  std::string root_; ///< <cgroup root>/cpu
  error err_;
};

} // namespace dsec::backends
