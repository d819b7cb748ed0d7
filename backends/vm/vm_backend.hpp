// The microvm and vm backends: a sandbox is a QEMU guest booting Debian's
// kernel (uncompressed vmlinux, PVH direct boot) with our initramfs, whose
// PID 1 is dsec-init in guest mode (backends/init/guest.cpp). The layers are
// the node's EROFS images as read-only virtio disks, the overlay lives inside
// the guest with its writable upper on one more disk, a sparse ext4 image of
// disk_mb per sandbox (upper_disk.hpp), and the node talks to the
// guest over two virtio-serial ports: the init protocol (exec) and the file
// channel. `microvm` is QEMU's -M microvm (virtio-mmio, ~2 s to the agent
// under TCG); `vm` is a q35 PC (virtio-pci, ~5 s). KVM is used when a
// probe at node start proves it runs guests, TCG otherwise (vm_accel.hpp;
// $DSEC_VM_ACCEL forces one). A node that stops cancels every boot,
// template build and restore in flight (inflight.hpp).
//
// Firecracker (a microVM monitor needing KVM) would be a third machine line
// here; this machine has no KVM, so it is not built.
//
// A create restores a clone of a pre-booted template of the same machine
// (vm_template.hpp) when it can (~0.3 s instead of a boot); the first create
// of a kind makes the template by booting, and any failure falls back to a
// boot.
//
// Files in a sandbox's <dir>: console.log (the guest's serial console),
// qemu.log, upper.img (the upper disk; a taken spare's stays in the spare
// dir when the sandboxes are on another filesystem, and goes with the
// sandbox), state (while paused). No socket files: every channel is a
// socketpair whose guest end QEMU inherits.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "backends/vm/inflight.hpp"
#include "backends/vm/vm_accel.hpp"

namespace dsec::backends {

/// Node-wide settings of the VM backends.
struct vm_config {
  std::string node_id;
  /// The static dsec-init; copied into the initramfs.
  std::string init_path;
  /// Guest kernel cache (scripts/guest_kernel.sh): vmlinux, modules/*.ko.
  /// Empty: $DSEC_GUEST_DIR, else /var/lib/dsec/guest.
  std::string guest_dir;
  /// Where the node writes the initramfs (a directory of its state dir).
  std::string work_dir;
  /// qemu-system-x86_64; empty: $DSEC_QEMU, else found on PATH.
  std::string qemu;
  /// Where guest templates live (a tmpfs: their RAM files); empty:
  /// $DSEC_VM_TEMPLATE_DIR, else /dev/shm/dsec-<node_id>. Removed at start
  /// and when the backends go. $DSEC_VM_TEMPLATES=0 turns templates off
  /// (every create boots), N keeps at most N (default 4). See vm_template.hpp.
  std::string template_dir;
};

/// The VM backends this node can run, and why the others cannot.
struct vm_backends {
  std::map<std::string, std::shared_ptr<backend>> ready;
  std::map<std::string, std::string> unavailable;
  /// The guests' accelerator (null when none is ready).
  std::shared_ptr<vm_accel> accel;
  /// Their QEMUs in flight; the node's stop path calls cancel_all().
  std::shared_ptr<inflight_qemus> inflight;
};

/// Checks qemu, the guest kernel and $DSEC_VM_ACCEL, builds the initramfs,
/// starts the accelerator probe (it runs on its own; creates wait for it),
/// and makes "microvm" and "vm" (or says why not). Blocking (~100 ms).
vm_backends make_vm_backends(const vm_config& cfg);

} // namespace dsec::backends
