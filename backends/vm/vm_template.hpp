// VM templating: create a microvm/vm sandbox by restoring a pre-booted
// guest instead of booting one (as Kata's "VM templating", E2B and
// Firecracker snapshots do).
//
// A template is one guest per key (machine type, accel, layer images,
// memory, cpus, disk size) booted with its RAM in a tmpfs file
// (memory-backend-file, share=on) until its PID 1 serves the file port,
// i.e. the root is built and the agent waits for its `config`. Then it is
// stopped and only its device state is saved (the x-ignore-shared migration
// capability skips the shared RAM) to a small state file, and QEMU ends.
// A clone starts QEMU on the same file with share=off (MAP_PRIVATE: the
// template's pages stay shared in the page cache between clones, a page a
// clone writes becomes its own) and loads the state with -incoming. The
// guest's writable upper is a tmpfs inside guest RAM and the layer disks are
// the read-only store images, so nothing on disk needs copying. The node
// then sends the clone its config (id, protect, seccomp: the agent sets up
// only now) and its identity: host clock and fresh entropy, with a CRNG
// reseed (guest_proto.hpp), so clones share no random state.
//
// The template is made after the agent's setup: its config (template
// hostname, the spec's protect lists, which are part of the key) is sent at
// boot and the snapshot is taken once it answered `ready`, so a clone skips
// the setup; its own hostname comes with the identity.
//
// Files: <root>/<hash of key>/{mem,state,console.log,qemu.log}; <root> is
// $DSEC_VM_TEMPLATE_DIR or /dev/shm/dsec-<node-id>, removed when the backend
// goes (node stop) and at start (leftovers of a killed node).
// $DSEC_VM_TEMPLATES: 0 turns templating off; N keeps at most N templates
// (least recently used dropped first; default 4).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/vm/qemu.hpp"
#include "core/error.hpp"

namespace dsec::backends {

/// One template's files; they are removed when the last holder lets go (a
/// clone being restored holds it; a running clone needs only its mapping).
struct vm_template {
  std::string key, dir, mem, state;
  vm_template() = default;
  vm_template(const vm_template&) = delete;
  vm_template& operator=(const vm_template&) = delete;
  ~vm_template();
};

/// Boots `m` (its RAM put in <dir>/mem, share=on) until the guest's PID 1
/// answers on the file port, then saves the device state to <dir>/state
/// and ends QEMU. Blocking (a boot: seconds under TCG). On failure the
/// error names the step; nothing but <dir> remains (the caller removes it).
/// `config` is queued to the agent; `await_ready(ctl, pidfd)` waits for its
/// answer.
using ready_waiter = std::function<status(int ctl, int pidfd)>;
expected<std::shared_ptr<vm_template>> make_vm_template(machine_spec m, const std::string& key,
                                                        const std::string& dir,
                                                        const std::string& config,
                                                        const ready_waiter& await_ready);

/// Starts a clone of `t`: QEMU with `m` (set up here as restored from the
/// template's file) on the guest channel ends `ctl` and `files`, loads the
/// state and lets the guest run; its agent is set up and serving. The
/// caller then sends the identity. On failure QEMU is stopped.
expected<qemu_process> start_vm_clone(const vm_template& t, machine_spec& m, int ctl, int files,
                                      const std::string& log, int timeout_ms);

/// Sends the guest its identity (host clock, 64 random bytes, `hostname`
/// unless empty) on the file channel `files` and waits for the answer,
/// watching QEMU's `pidfd`.
status send_guest_identity(int files, int pidfd, int timeout_ms,
                           const std::string& hostname = {});

/// The templates of one backend, by key. Thread-safe.
class template_cache {
 public:
  using maker = std::function<expected<std::shared_ptr<vm_template>>(const std::string& dir)>;

  /// `max` 0: templating off.
  template_cache(std::string root, size_t max);
  ~template_cache();
  template_cache(const template_cache&) = delete;
  template_cache& operator=(const template_cache&) = delete;

  [[nodiscard]] bool enabled() const { return max_ > 0; }
  [[nodiscard]] const std::string& root() const { return root_; }

  /// The template for `key`. The first caller makes it with `make` on its
  /// own thread; concurrent callers for the key wait for that (at most
  /// `wait_ms`). Null: templating is off, or making it failed (the reason
  /// is logged once; another try after a while), or the wait timed out.
  std::shared_ptr<vm_template> get(const std::string& key, const maker& make, int wait_ms);

  /// Forgets `key`'s template (a clone of it failed): the next get makes a
  /// new one.
  void drop(const std::string& key, const std::string& why);

 private:
  struct slot {
    std::shared_ptr<vm_template> t;
    bool building = false;
    std::string failed;
    int64_t failed_at_ms = 0;
    uint64_t used = 0;
  };
  void evict_locked();

  std::string root_;
  size_t max_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::string, slot> slots_;
  uint64_t clock_ = 0;
};

} // namespace dsec::backends
