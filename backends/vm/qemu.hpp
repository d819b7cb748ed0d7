// QEMU for the microvm and vm backends: the command line of one guest, the
// process (started with PR_SET_PDEATHSIG so a dead node leaves no guest
// behind, its channels passed as inherited socket fds, so no socket file
// ever exists), and a small blocking QMP client for pause/resume.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// Descriptor numbers the channels have inside QEMU.
constexpr int qemu_ctl_fd = 3;   ///< virtserialport "dsec.ctl" (init protocol)
constexpr int qemu_files_fd = 4; ///< virtserialport "dsec.files" (guest_proto)
constexpr int qemu_qmp_fd = 5;   ///< QMP monitor

/// One guest machine.
struct machine_spec {
  bool microvm = true; ///< -M microvm (virtio-mmio), else q35 (virtio-pci)
  bool kvm = false;    ///< -accel kvm, else tcg
  std::string qemu;    ///< qemu-system-x86_64 path
  std::string kernel;  ///< uncompressed vmlinux (PVH boot)
  std::string initrd;
  std::string append;  ///< kernel command line
  int64_t mem_mb = 512;
  int cpus = 1;
  std::vector<std::string> disks; ///< raw read-only layer images, bottom first
  /// The guest's own writable upper disk (raw ext4, serial "dsec-upper",
  /// see upper_disk.hpp); empty: none.
  std::string upper;
  std::string console_log;        ///< the guest's serial console goes here
  /// Guest RAM is always the memory backend "mem" (the RAM block's name in a
  /// state file): anonymous memory when `mem_path` is empty, else that file
  /// (tmpfs), MAP_SHARED with `mem_shared` (a template being made: the file
  /// is the guest's RAM), MAP_PRIVATE without (a clone: copy-on-write over
  /// the template's pages, which stay shared in the page cache).
  std::string mem_path;
  bool mem_shared = false;
  /// No -kernel/-initrd/-append: a restored machine needs no boot files (and
  /// QEMU then keeps no 60 MiB mapping of the vmlinux as a reset ROM).
  bool restored = false;
};

/// The argument vector. `incoming`: empty boots; "defer" waits for
/// migrate-incoming on QMP (templates: capabilities first); otherwise the
/// state file to restore.
std::vector<std::string> qemu_argv(const machine_spec& m, const std::string& incoming = {});

/// A running QEMU.
struct qemu_process {
  pid_t pid = -1;
  sys::unique_fd pidfd;
  sys::unique_fd qmp; ///< our end of the QMP channel
  bool qmp_ready = false; ///< greeting read and capabilities negotiated
};

/// Starts QEMU with `ctl` and `files` (the guest ends of the two channels)
/// as fds 3 and 4 and a new QMP channel as fd 5; stdout/stderr append to
/// `log`. QEMU dies with the thread that started it (PR_SET_PDEATHSIG).
/// `thp`: transparent huge pages for QEMU's own memory (see qemu.cpp).
expected<qemu_process> start_qemu(const std::vector<std::string>& argv, int ctl, int files,
                                  const std::string& log, bool thp = true);

/// Kills QEMU and reaps it (idempotent on a reaped pidfd).
void stop_qemu(qemu_process& q);

/// The last `max` bytes of a log file, one line, for error messages.
std::string log_tail(const std::string& path, size_t max = 300);

/// Blocking QMP: reads the greeting and negotiates capabilities on first
/// use. `cmd` is a JSON object; returns the raw "return" line, or the error.
/// Events in between are skipped.
class qmp_client {
 public:
  /// `ready`: the greeting was already read and capabilities negotiated by
  /// an earlier client on this channel.
  explicit qmp_client(int fd, bool ready = false) : fd_(fd), ready_(ready) {}
  [[nodiscard]] bool ready() const { return ready_; }
  expected<std::string> command(const std::string& cmd, int timeout_ms = 30000);

 private:
  expected<std::string> read_line(int timeout_ms);
  int fd_;
  bool ready_;
  std::string in_;
};

} // namespace dsec::backends
