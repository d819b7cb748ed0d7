// The accelerator of the node's guests, decided once per node by proof, not
// by the device file: some machines of our kind have a /dev/kvm that opens
// but runs no guest (nested KVM without vmx/svm: QEMU aborts setting an MSR,
// or a Debian kernel does not print its first line in 40 s), while TCG boots
// the same kernel to its root-mount panic in ~1.3-3 s.
//
// At node start a thread (off the create path; node start does not wait)
// first asks KVM itself (open the device, KVM_GET_API_VERSION, KVM_CREATE_VM:
// < 1 ms), then boots the guest kernel under `-accel kvm -cpu host` (what
// the guests run) with no root device and `panic=-1 -no-reboot`: QEMU exits
// 0 at the kernel's root-mount panic. KVM is used when that happens within
// the deadline (5 s, $DSEC_VM_KVM_PROBE_S: a working KVM gets there in well
// under 1 s even on a loaded host, and a KVM slower than 5 s loses to TCG's
// ~2 s anyway; a deadline too short falls back to TCG, which still works).
// Otherwise TCG, with the reason. One log line says which and why.
//
// The boot probe's result is kept per machine boot in /run/dsec/kvm-probe
// ($DSEC_VM_KVM_PROBE_CACHE: another file, "off": none): a machine runs many
// nodes (the e2e suite starts dozens), and where KVM hangs each probe burns a
// core for its whole deadline. The key names everything the result depends
// on (boot id, QEMU binary and guest kernel by path, size and mtime, the
// deadline), so another QEMU or kernel probes again; delete the file to
// force it. The KVM ioctls always run (they are cheap).
//
// $DSEC_VM_ACCEL: auto (default) as above; tcg: no probe; kvm: the probe
// still runs, and if KVM fails it every create is refused (unavailable,
// naming the probe's result) instead of timing out three times. Any other
// value makes microvm and vm unavailable, saying so (make_vm_backends).
// $DSEC_QEMU (the QEMU binary) is what the probe runs, so a wrapper that
// fails or hangs with `-accel kvm` simulates a broken KVM (the e2e tests).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/vm/inflight.hpp"
#include "core/error.hpp"

namespace dsec::backends {

/// $DSEC_VM_ACCEL.
enum class accel_mode { automatic, kvm, tcg };

/// Parses $DSEC_VM_ACCEL (null or empty: automatic); anything but
/// auto|kvm|tcg is invalid_argument naming the value.
expected<accel_mode> parse_accel_mode(const char* value);

/// KVM's own checks on `device`: it opens read-write, KVM_GET_API_VERSION is
/// 12, KVM_CREATE_VM works. The error says which failed ("no /dev/kvm").
status kvm_ioctl_check(const std::string& device = "/dev/kvm");

/// What the boot probe runs.
struct kvm_probe_spec {
  std::string qemu;
  std::string kernel;   ///< the guests' uncompressed vmlinux
  std::string work_dir; ///< its logs go here while it runs (then removed)
  int deadline_ms = 5000;
  /// Where the result is kept for this machine's boot; empty: nowhere.
  std::string cache_path;
};

/// Boots `s.kernel` under KVM with no root; the seconds it took to reach the
/// root-mount panic, or why not (QEMU's exit and log, the deadline, the node
/// stopping). The QEMU is registered with `inflight` and always reaped.
expected<double> kvm_boot_probe(const kvm_probe_spec& s, inflight_qemus& inflight);

/// The decision, as creates and /healthz see it.
struct accel_choice {
  bool decided = false; ///< false: the probe still runs
  bool kvm = false;     ///< -accel kvm, else tcg
  /// Why this accelerator ("kvm probe booted to the kernel panic in 0.31 s",
  /// "no /dev/kvm", "DSEC_VM_ACCEL=tcg", ...).
  std::string reason;
  /// Non-empty: creates are refused with this (DSEC_VM_ACCEL=kvm that does
  /// not work).
  std::string refused;
};

/// The node's accelerator: the probe thread starts in the constructor.
/// Thread-safe.
class vm_accel {
 public:
  /// `who` begins the log line ("dsec node <id>").
  vm_accel(accel_mode mode, kvm_probe_spec probe, std::shared_ptr<inflight_qemus> inflight,
           std::string who);
  ~vm_accel();
  vm_accel(const vm_accel&) = delete;
  vm_accel& operator=(const vm_accel&) = delete;

  /// The choice, waiting for the probe at most `wait_ms` (the first creates
  /// after start). Not decided after the wait (or the node stopping) is
  /// reported as such; callers refuse the create.
  accel_choice wait(int wait_ms);

  /// The choice now; never blocks.
  accel_choice peek() const;

  /// How long a create should wait for the probe at most.
  [[nodiscard]] int max_wait_ms() const { return probe_.deadline_ms + 10000; }

 private:
  void run();

  accel_mode mode_;
  kvm_probe_spec probe_;
  std::shared_ptr<inflight_qemus> inflight_;
  std::string who_;
  struct shared {
    std::mutex m;
    std::condition_variable cv;
    accel_choice choice;
    bool cancelled = false; ///< the node stops
  };
  std::shared_ptr<shared> s_ = std::make_shared<shared>();
  std::thread thread_;
};

} // namespace dsec::backends
