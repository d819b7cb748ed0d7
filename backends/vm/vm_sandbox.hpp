// vm_sandbox: the node's handle on one microvm or vm guest. Exec, stdin,
// cancel, the process table and the exit report run over an init_channel
// (channel_sandbox), as for a container: the guest's init speaks the same protocol on our end of the
// control socketpair. What differs lives here: QEMU (its pidfd stands
// behind an eventfd the channel watches as "init"), files over the guest's
// second port (guest_proto.hpp), pause/resume by saving the whole machine to
// <dir>/state and ending QEMU, and destroy.
//
// The guest ends of both socketpairs stay open in the node for the life of
// the sandbox, so a QEMU that exits (pause) does not close the channels and
// a restored QEMU continues them; frames sent while paused wait in them.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.hpp"
#include "backends/channel/channel_sandbox.hpp"
#include "backends/channel/init_channel.hpp"
#include "backends/channel/io_loop.hpp"
#include "backends/vm/inflight.hpp"
#include "backends/vm/qemu.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// What vm_backend::create hands over.
struct vm_parts {
  std::string id, dir;
  machine_spec machine;
  qemu_process qemu;
  sys::unique_fd ctl_node, ctl_guest;     ///< control channel socketpair
  sys::unique_fd files_node, files_guest; ///< file channel socketpair
  std::map<std::string, std::string> env;
  /// The node's in-flight QEMUs: a resume registers its restoring QEMU.
  std::shared_ptr<inflight_qemus> inflight;
  /// Where a batch QEMU's cpu group goes: <cgroup_root>/cpu/dsec-batch/<node_id>/<id>.
  std::string node_id;
  std::string cgroup_root = "/sys/fs/cgroup";
};

/// Exec, stdin, cancel, the process table and signals come from
/// channel_sandbox, as a container's do.
class vm_sandbox final : public channel_sandbox, public std::enable_shared_from_this<vm_sandbox> {
 public:
  vm_sandbox(std::shared_ptr<io_loop> loop, vm_parts parts);
  ~vm_sandbox() override;

  /// Builds the channel and watches QEMU. Call once after make_shared.
  status start();

  status write_file(const std::string& path, std::string_view data, uint32_t mode) override;
  expected<std::string> read_file(const std::string& path, size_t max_bytes) override;
  /// The channel's report, or why QEMU ended when it did.
  void on_exit(std::function<void(std::string reason)> f) override;
  status destroy() override;
  int init_pid() const override { return pid_.load(); }
  status pause() override;
  status resume() override;
  /// QEMU's RSS and swap (/proc/<pid>/status VmRSS, VmSwap) and the guest
  /// kernel's busy CPU time (init_proto::msg::cpu_query; QEMU's own if the
  /// guest does not answer within a second); zeros while paused (QEMU has
  /// ended; the guest is a state file on disk).
  expected<usage_sample> usage() override;
  /// SCHED_IDLE / SCHED_OTHER on every QEMU thread (vCPUs included; threads
  /// QEMU starts later inherit it), and for batch QEMU's process in a cpu
  /// group of its own under the idle dsec-batch (cpu_class.hpp; latency moves
  /// it back beside the node). A QEMU started by resume gets the class too.
  status set_cpu_class(const std::string& cls) override;

 private:
  void watch_qemu_locked();
  void on_qemu_exit();
  expected<std::string> file_call(const std::string& frame, const std::string& what);
  int64_t guest_cpu_ns();

  std::shared_ptr<io_loop> loop_;
  vm_parts parts_;
  sys::unique_fd exit_event_; ///< readable = the guest is gone (the channel's "pidfd")
  std::atomic<int> pid_{-1};

  std::mutex op_m_; ///< serializes pause, resume, destroy and file calls
  std::mutex m_;
  uint64_t qemu_token_ = 0;
  bool paused_ = false;
  bool destroying_ = false;
  std::string cpu_class_ = "latency";
  std::string died_of_;
  uint32_t next_file_id_ = 1;
};

} // namespace dsec::backends
