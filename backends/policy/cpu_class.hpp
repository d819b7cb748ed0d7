// CPU classes (DESIGN.md §6): a `batch` sandbox runs every task under
// SCHED_IDLE in a cpu cgroup of minimum weight under an idle top-level group,
// so that everything else on the host preempts it at once and gets nearly
// all the CPU it wants; a `latency` one runs SCHED_OTHER with the default
// weight. Three mechanisms, because each covers what the others miss:
// - the place: a batch sandbox's cpu directory is
//   <cpu root>/dsec-batch/<node>/<id>, a latency one's <cpu root>/dsec/<node>/<id>
//   (the other controllers stay under dsec/ either way). An idle group is
//   idle only among its siblings, so a batch leaf inside dsec/<node> still
//   weighed, from the root of the hierarchy, as much as the whole dsec group:
//   a client in the root cgroup lost about half the CPU to it (+48% on a
//   latency exec's round trip). dsec-batch is idle at the root itself, so it
//   loses to root tasks, the node and latency sandboxes alike;
// - the group knobs (cpu.shares 2, cpu.idle 1) decide among siblings;
// - the task policy decides against the node's own threads and is
//   inherited by whatever the sandbox forks later.
// Used by the container backend (its cgroup, moved between the two places
// on a class change) and the VM backends (QEMU's process, moved the same way).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
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

// -- where a class puts a sandbox in the cpu hierarchy ------------------------

/// The top-level group of batch work, idle at the root of the hierarchy;
/// shared by the host's nodes, each with its own <batch_top>/<node>.
inline constexpr const char* batch_top = "dsec-batch";

/// The path, relative to the cgroup root, of sandbox `id`'s cpu directory in
/// class `cls`: dsec/<node>/<id> (latency, as every other controller) or
/// dsec-batch/<node>/<id> (batch).
std::string class_cpu_rel(const std::string& node_id, const std::string& id,
                          const std::string& cls);

/// What a sandbox's cpu directory path says: the cgroup root it is under,
/// its node and id, and whether it is the batch place.
struct cpu_place {
  std::string cgroup_root, node_id, id;
  bool batch = false;
};

/// Splits <cgroup root>/cpu/{dsec|dsec-batch}/<node>/<id>; invalid_argument
/// for any other path.
expected<cpu_place> parse_cpu_dir(const std::string& cpu_dir);

/// Makes the cpu directory of sandbox `id` in class `cls` ready before any
/// task joins it, and returns its relative path (class_cpu_rel). For batch:
/// <cpu>/dsec-batch (made idle if new), dsec-batch/<node>, and the
/// sandbox's own directory with the batch knobs; for latency nothing (the
/// cgroup makes it). Retries when another node removes an empty parent
/// meanwhile (the last node out removes dsec-batch).
expected<std::string> prepare_class_cpu_dir(const std::string& cgroup_root,
                                            const std::string& node_id,
                                            const std::string& id, const std::string& cls);

/// Moves `cg`'s cpu directory with its tasks to class `cls`'s place and
/// applies the class (knobs, every task's policy). Blocking.
status move_cgroup_to_class(sys::cgroup& cg, const std::string& cls);

/// Freezes `cg` (pause). A task must run to freeze, and under the idle
/// dsec-batch a busy host lets it run only after everything else (measured
/// at load 40: the 1 s freeze timed out): a batch group is moved to the
/// latency place for the freeze, at SCHED_OTHER, and back once frozen (a
/// frozen task changes group and policy without running). Blocking.
status freeze_in_class(sys::cgroup& cg);

/// Opens sandbox `id`'s cgroup after a node restart, its cpu directory where
/// it is (dsec-batch/<node>/<id> if that exists). Where a node died in the
/// middle of a move and both exist, the tasks go on to the batch one.
std::unique_ptr<sys::cgroup> open_sandbox_cgroup(const std::string& cgroup_root,
                                                 const std::string& node_id,
                                                 const std::string& id);

/// The same for a process with no cgroup of its own (QEMU): batch moves it,
/// only in the cpu controller, into dsec-batch/<node>/<id>; latency moves it
/// back into the node's own cpu group and removes that directory. Then
/// every thread's policy (threads started later inherit both).
status place_process_in_class(pid_t pid, const std::string& cgroup_root,
                              const std::string& node_id, const std::string& id,
                              const std::string& cls);

/// Removes dsec-batch/<node>/<id> once its process is gone (QEMU stopped
/// by pause or destroy), retrying while exiting tasks keep it busy.
/// Missing is fine.
void remove_process_cpu_dir(const std::string& cgroup_root, const std::string& node_id,
                            const std::string& id);

/// The node process's place in the cpu hierarchy: <root>/cpu/dsec/<node>/_node,
/// beside its latency sandboxes (what it runs, spare QEMUs and the fncall
/// pool, starts there too). Only the cpu controller. At start it prunes
/// what nodes killed with -9 left: empty _node groups older than a minute,
/// empty dsec-batch/<node>/<id> groups (this node's at any age: nothing of
/// it is being made yet, recovered sandboxes hold tasks) and dsec-batch/<node>
/// of nodes that no longer run. leave() (or the destructor) moves the
/// process back where it was and removes _node, dsec/<node> and
/// dsec-batch/<node> once empty, and dsec and dsec-batch with the host's
/// last node.
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
  /// The group's cpu.shares: 16 latency sandboxes' worth (each has 1024).
  /// The node serves every sandbox (exec, files, creates, reclaim's
  /// page-out, whose compression runs on the node's thread), so at one
  /// sandbox's weight a burst of 25 busy agents left it ~4% of the CPU and
  /// reclaim fell behind the creates (density bench, 2026-12-02). When the
  /// node is idle the weight costs nothing; batch sandboxes lose to it
  /// either way (dsec-batch is an idle group).
  static constexpr int node_shares = 16384;

 private:
  std::string dir_;  ///< empty unless joined
  std::string back_; ///< the cpu group it came from
  std::string root_; ///< <cgroup root>/cpu
  std::string node_;
  bool left_ = false;
  error err_;
};

} // namespace dsec::backends
