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
// layer disks are the read-only store images; the guest's writable upper is
// an ext4 disk (upper_disk.hpp) the template guest mounted from its own copy
// of the pristine image: the snapshot includes that mount, so each clone
// (and spare) gets its own copy of the template's image as it was when the
// template's QEMU ended (everything written; nothing writes it after), the
// bytes the restored guest's page cache and ext4 state expect. A clone's
// writes go to its copy only. The node
// then sends the clone its config (id, protect, seccomp: the agent sets up
// only now) and its identity: host clock and fresh entropy, with a CRNG
// reseed (guest_proto.hpp), so clones share no random state.
//
// The template is made after the agent's setup: its config (template
// hostname, the spec's protect lists, which are part of the key) is sent at
// boot and the snapshot is taken once it answered `ready`, so a clone skips
// the setup; its own hostname comes with the identity.
//
// Files: <root>/<hash of key>/{mem,state,upper.img,console.log,qemu.log}; <root> is
// $DSEC_VM_TEMPLATE_DIR or /dev/shm/dsec-<node-id>, removed when the backend
// goes (node stop) and at start (leftovers of a killed node).
// $DSEC_VM_TEMPLATES: 0 turns templating off; N keeps at most N templates
// (least recently used dropped first; default 4).
//
// Spares: under TCG most of a clone's create -> first exec is QEMU starting
// (~0.25 s) and translating again the guest code the first exec runs
// (~0.25 s: the translation cache is per process). So the cache keeps one
// spare clone per template ready: restored, running, its first exec (`true`)
// done, idle. A create takes it and only sends the identity (which reseeds
// the guest's CRNG, sets its clock and hostname: a spare has no per-sandbox
// state before that), and a thread of the cache starts the next spare. A
// spare knows no sandbox: its logs and upper image live in <spare dir> (the
// node's <state>/vm/spares, usually on the sandboxes' filesystem) and are
// renamed into the sandbox dir when taken (an upper that cannot be renamed
// stays where it is and goes with the sandbox); it is killed with its template and when the cache
// goes; it counts toward no sandbox until taken. $DSEC_VM_SPARES: spares
// per template (default 1; 0: none). A template no create used for
// $DSEC_VM_SPARE_IDLE_S (default 600) keeps none until its next create (an
// idle guest costs ~5% of a core under TCG, a spare ~33 MiB + its pages).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/vm/qemu.hpp"
#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// One template's files; they are removed when the last holder lets go (a
/// clone being restored holds it; a running clone needs only its mapping).
struct vm_template {
  std::string key, dir, mem, state, upper;
  machine_spec machine; ///< what it was booted as (clones and spares start from it)
  vm_template() = default;
  vm_template(const vm_template&) = delete;
  vm_template& operator=(const vm_template&) = delete;
  ~vm_template();
};

/// Boots `m` (its RAM put in <dir>/mem, share=on; its upper disk a copy of
/// `pristine_upper` at <dir>/upper.img) until the guest's PID 1
/// answers on the file port, then saves the device state to <dir>/state
/// and ends QEMU. Blocking (a boot: seconds under TCG). On failure the
/// error names the step; nothing but <dir> remains (the caller removes it).
/// `config` is queued to the agent; `await_ready(ctl, pidfd)` waits for its
/// answer. `started(pidfd)`, if set, is called once QEMU runs (the caller
/// may kill it to abort: the node stopping).
using ready_waiter = std::function<status(int ctl, int pidfd)>;
expected<std::shared_ptr<vm_template>> make_vm_template(
  machine_spec m, const std::string& key, const std::string& dir, const std::string& config,
  const std::string& pristine_upper, const ready_waiter& await_ready,
  const std::function<void(int)>& started = {});

/// Starts a clone of `t`: QEMU with `m` (set up here as restored from the
/// template's file, its upper disk a copy of the template's at `upper`) on
/// the guest channel ends `ctl` and `files`, loads the
/// state and lets the guest run; its agent is set up and serving. The
/// caller then sends the identity. On failure QEMU is stopped and `upper`
/// removed.
/// `started(pidfd)`, if set, is called once QEMU runs.
expected<qemu_process> start_vm_clone(const vm_template& t, machine_spec& m, int ctl, int files,
                                      const std::string& upper, const std::string& log,
                                      int timeout_ms,
                                      const std::function<void(int)>& started = {});

/// Sends the guest its identity (host clock, 64 random bytes, `hostname`
/// unless empty) on the file channel `files` and waits for the answer,
/// watching QEMU's `pidfd`.
status send_guest_identity(int files, int pidfd, int timeout_ms,
                           const std::string& hostname = {});

/// A clone ready to be taken (see the top): QEMU running the restored guest,
/// both channels, its logs and upper image (machine.upper; in the spare dir
/// until taken). Destroying it kills QEMU and removes those files.
struct vm_spare {
  machine_spec machine; ///< console_log, upper: the spare's files
  std::string log;      ///< QEMU's stdout/stderr
  qemu_process qemu;
  sys::unique_fd ctl_node, ctl_guest, files_node, files_guest;
  vm_spare() = default;
  vm_spare(const vm_spare&) = delete;
  vm_spare& operator=(const vm_spare&) = delete;
  ~vm_spare();
};

/// Starts a clone of `t` with its logs at <prefix>.{qemu,console}.log, its
/// upper at <prefix>.upper.img, and
/// runs one exec (`true`) in it, so the code a first exec runs is
/// translated. `started(pidfd)` is called once QEMU runs (the caller may
/// kill it to abort). Blocking (~0.5 s under TCG).
expected<std::unique_ptr<vm_spare>> make_vm_spare(const vm_template& t, const std::string& prefix,
                                                  int timeout_ms,
                                                  const std::function<void(int)>& started);

/// The templates of one backend, by key. Thread-safe.
class template_cache {
 public:
  using maker = std::function<expected<std::shared_ptr<vm_template>>(const std::string& dir)>;

  /// `max` 0: templating off. `spares`: ready clones kept per template
  /// (0: none) while a create used it within `spare_idle_ms`; their logs go
  /// to `spare_dir` (see the top), removed at start and when the cache goes.
  template_cache(std::string root, size_t max, std::string spare_dir = {}, size_t spares = 0,
                 int spare_timeout_ms = 30000, int64_t spare_idle_ms = 600000);
  ~template_cache();
  template_cache(const template_cache&) = delete;
  template_cache& operator=(const template_cache&) = delete;

  [[nodiscard]] bool enabled() const { return max_ > 0; }

  /// The node stops: no more templates or spares (the spare being made is
  /// killed), waiters in get()/take_spare() return. The spare thread lives
  /// on until the destructor: the QEMUs it started, sandboxes among them,
  /// die with it. Idempotent; the destructor calls it.
  void stop();
  [[nodiscard]] const std::string& root() const { return root_; }

  /// The template for `key`. The first caller makes it with `make` on its
  /// own thread; concurrent callers for the key wait for that (at most
  /// `wait_ms`). Null: templating is off, or making it failed (the reason
  /// is logged once; another try after a while), or the wait timed out.
  std::shared_ptr<vm_template> get(const std::string& key, const maker& make, int wait_ms);

  /// Forgets `key`'s template (a clone of it failed): the next get makes a
  /// new one.
  void drop(const std::string& key, const std::string& why);

  /// One of `key`'s spares, if one is ready; if none is but one is being
  /// made, the first caller waits for it (at most `wait_ms`), others get
  /// null at once. The next spare is made in the background.
  std::unique_ptr<vm_spare> take_spare(const std::string& key, int wait_ms = 0);

 private:
  struct slot {
    std::shared_ptr<vm_template> t;
    bool building = false;
    std::string failed;
    int64_t failed_at_ms = 0;
    uint64_t used = 0;
    int64_t used_at_ms = 0;
    std::vector<std::unique_ptr<vm_spare>> spares;
    bool spare_building = false;
    bool spare_claimed = false; ///< a create waits for the one being made
    int64_t spare_failed_at_ms = 0;
  };
  void evict_locked();
  void spare_loop();

  std::string root_;
  size_t max_;
  std::string spare_dir_;
  size_t spares_;
  int spare_timeout_ms_;
  int64_t spare_idle_ms_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::string, slot> slots_;
  uint64_t clock_ = 0;
  // The spare maker: QEMU dies with the thread that started it
  // (PR_SET_PDEATHSIG), so one long-lived thread starts every spare.
  std::condition_variable spare_cv_;
  bool stopping_ = false;
  sys::unique_fd spare_pidfd_; ///< the spare being made (killed when stopping)
  uint64_t spare_seq_ = 0;
  bool quit_ = false; ///< the destructor: the spare thread ends
  std::thread spare_thread_;
};

} // namespace dsec::backends
