// The host-side mechanisms behind create() and recover(): the sealed copy of
// dsec-init, the overlay mount, the control socket, the clone of init into
// new namespaces (the meta file that lets a restarted node find its
// sandboxes again is sandbox_meta.hpp). Internal to the container backend.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// The init binary as a sealed memfd (no write, grow, shrink, or new seals).
struct launch_image {
  sys::unique_fd memfd;
  sys::unique_fd devnull; ///< init's stdin/stdout/stderr
};

/// Copies `path` into a sealed memfd once per backend.
expected<launch_image> seal_init_binary(const std::string& path);

/// A sandbox root as two detached mounts of one overlay superblock: neither
/// is in any mount namespace when create() holds them, so the host's mount
/// table never grows with the sandboxes.
struct overlay_root {
  /// Handed to init, which attaches it inside its own mount namespace: on
  /// "/" of the launch template (then chroots into it), or at <dir>/rootfs
  /// (then pivots into it) when the node launches from the host namespace.
  sys::unique_fd mount;
  /// A clone of the same mount, attached nowhere: the node's O_PATH root for
  /// file calls. It has no submounts (no /proc, /dev or protect mounts of the
  /// sandbox), so file calls see the plain merged tree. Init keeps a copy as
  /// init_proto::root_view_fd, where a restarted node takes it back.
  sys::unique_fd node_view;
};

/// Makes the upper, work and (empty mount point) rootfs dirs in <dir> and an
/// overlay over `lower_dirs` (bottom first) as an overlay_root. With
/// `existing` the three are those of a powered-off sandbox, taken as they
/// are (overlayfs empties its work directory itself).
expected<overlay_root> mount_overlay(const std::string& dir,
                                     const std::vector<std::string>& lower_dirs,
                                     bool existing = false);

/// The listening socket at <dir>/ctl.sock (given to init) and the node's
/// connected end (already queued in the backlog, answered once init runs).
struct control_socket {
  sys::unique_fd listener;
  sys::unique_fd client;
};
expected<control_socket> make_control_socket(const std::string& dir);

/// Connects anew to <dir>/ctl.sock (recover); init takes the newest peer.
expected<sys::unique_fd> connect_control_socket(const std::string& dir);

/// The namespaces the launcher thread moves into before its first launch
/// (launch_template.cpp says why and how).
struct launch_template {
  /// True: the thread's mount namespace holds only an empty read-only root;
  /// init attaches the sandbox root on "/" and chroots (config_msg::
  /// in_template) instead of pivot_root, and finds no host mount below.
  bool mount_ns = false;
  /// A detached read-only sysfs tree (masks included) of a network
  /// namespace with only a loopback, cloned for every sandbox without
  /// network (config_msg::shared_sysfs). Empty if not made.
  sys::unique_fd sysfs;
  /// True: setup stopped half-way in a namespace the thread cannot launch
  /// from; the node launches from its own threads instead.
  bool broken = false;
  std::string error; ///< why a part is missing ("" if none was asked or all worked)
};

/// Run on the launcher thread (changes only that thread's namespaces).
launch_template enter_launch_template(bool mount_ns, bool sysfs);

/// A started init.
struct launched {
  pid_t pid = -1;
  sys::unique_fd pidfd;
};

/// Clones init into new pid, mount, uts, ipc and net namespaces with
/// `listener` as its fd 3, `root` (if given) as init_proto::root_mount_fd
/// and root_view_fd, and nothing else of ours open. A directory in `join`
/// is the cgroup v2 group the child is born in (clone3 CLONE_INTO_CGROUP);
/// before it execs, the child writes itself ("0") into every other file of
/// `join` (v1 `tasks` or `cgroup.procs`, open for writing), so init runs, and
/// its memory is charged, inside the sandbox's cgroups from its first
/// instruction.
/// `sysfs` (if >= 0, with a root only) becomes init_proto::sysfs_tree_fd.
expected<launched> launch_init(const launch_image& img, int listener,
                               const std::vector<int>& join,
                               const overlay_root* root = nullptr, int sysfs = -1);

/// Clones every init from one thread of the node whose descriptor table is
/// private and nearly empty. Why: a clone copies the caller's table and the
/// exec of init then closes every descriptor in it, one by one; the node
/// holds several per sandbox, so launching from a worker thread cost
/// O(sandboxes) (the biggest growing cost of a create at 1,600 sandboxes).
/// The thread takes the few descriptors a launch needs from the node's table
/// with pidfd_getfd, and the caller takes init's pidfd back the same way.
/// Launches are serialized (one clone+exec is well under a millisecond);
/// a node runs several launchers side by side (launcher_pool.hpp).
class init_launcher {
 public:
  /// Null if this kernel lacks what it needs (pidfd_getfd, thread pidfds):
  /// callers then use launch_init directly. `mount_template`, `sysfs_template`:
  /// which parts of launch_template to set up (DSEC_FLAT_OFF turns them off
  /// for benchmarks); a part that fails is logged and left out.
  static std::unique_ptr<init_launcher> start(bool mount_template = true,
                                              bool sysfs_template = true);
  ~init_launcher();

  /// launch_init, run on the launcher thread. `shared_sysfs`: hand init the
  /// sysfs template (only if has_sysfs()).
  expected<launched> launch(const launch_image& img, int listener, const std::vector<int>& join,
                            const overlay_root* root, bool shared_sysfs = false);

  /// Whether inits from this launcher start in the minimal mount template.
  bool in_template() const { return template_.mount_ns; }
  bool has_sysfs() const { return bool(template_.sysfs); }

  struct job; // INTERNAL

 private:
  init_launcher() = default;
  void run();

  std::mutex call_m_; ///< one launch at a time
  std::mutex m_;
  std::condition_variable cv_;
  job* job_ = nullptr;
  bool done_ = false, stop_ = false, ready_ = false, thread_ok_ = false;
  bool want_mount_template_ = true, want_sysfs_template_ = true;
  /// Set by the thread before ready_; its descriptors are in the thread's
  /// table and closed by the thread as it ends.
  launch_template template_;
  sys::unique_fd thread_pidfd_; ///< of the launcher thread: reaches its table
  std::thread thread_;
};

/// SIGKILL through the pidfd and wait for the exit (reaps if it is a child).
void kill_and_reap(int pidfd);

} // namespace dsec::backends
