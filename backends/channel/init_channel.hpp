// init_channel: the node's end of one dsec-init, shared by container
// sandboxes and VM guests (the guest's agent is the same init speaking the
// same protocol.hpp). It owns the control socket (frames out from any
// thread, frames in on the io_loop thread) and a descriptor that turns
// readable when init is gone: init's pidfd for a container, an eventfd that
// stands for QEMU for a guest. Over it run exec with its output, stdin and
// cancel, the process table and signals; when init dies, pending execs fail
// and on_exit hears why. Cgroups, mounts, files and QEMU belong to the
// sandbox handles that hold a channel (container_sandbox, vm_sandbox).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "backends/channel/io_loop.hpp"
#include "backends/channel/protocol.hpp"
#include "core/output_budget.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// What a channel is built from.
struct channel_parts {
  std::string id; ///< the sandbox's id, in every message
  /// True if init is our child (a container's create) and must be reaped
  /// with waitid on `pidfd`.
  bool reap = true;
  /// Readable once init is gone.
  sys::unique_fd pidfd;
  sys::unique_fd ctl; ///< the control socket to init
  std::map<std::string, std::string> env; ///< spec env, under each exec's env
  /// A new connection to the same init, for an init of protocol version 1
  /// that closes the channel at `hello` (protocol.hpp); empty where init
  /// cannot be reached again (a guest's serial port), and such an init is
  /// then a mismatch.
  std::function<expected<sys::unique_fd>()> reconnect;
  /// True: start() waits for init's hello and fails on a mismatch (a new
  /// init, which runs). False: start() sends hello and goes on; the answer
  /// comes on the loop thread whenever init runs (a recovered init may be
  /// frozen: a paused sandbox), and a mismatch then closes the channel with
  /// the mismatch as the reason every call fails with.
  bool await_hello = true;
};

/// How an out-of-memory in the sandbox reaches the channel (containers: the
/// memory controller's eventfd). Empty for a guest.
struct oom_watch {
  /// Readable when the memory controller hit OOM: init is then killed and
  /// its death reported as "oom".
  sys::unique_fd fd;
  /// True when the kernel counted an OOM kill in the sandbox; asked when
  /// init dies. Must stay callable for the channel's life.
  std::function<bool()> counted;
};

/// One control channel to one init. Thread-safe; callbacks run on the loop
/// thread.
class init_channel : public std::enable_shared_from_this<init_channel> {
 public:
  // -- constructors ---------------------------------------------------------

  init_channel(std::shared_ptr<io_loop> loop, channel_parts parts);
  /// Every pending exec and query still fails exactly once, on the loop
  /// thread ("sandbox handle released").
  ~init_channel();
  init_channel(const init_channel&) = delete;
  init_channel& operator=(const init_channel&) = delete;

  /// Agrees on a protocol version with init (`hello`, protocol.hpp), then
  /// registers the socket, the pidfd and `oom` with the loop. With
  /// channel_parts::await_hello it blocks for the hello's round trip and
  /// fails, naming both versions, if init speaks none this node does.
  /// Call once, after construction through make_shared.
  status start(oom_watch oom = {});

  /// The protocol version both ends speak (1 for an init from before hello);
  /// 0 before start().
  [[nodiscard]] uint32_t protocol_version() const;

  // -- exec -----------------------------------------------------------------

  /// Sends an `exec` frame; the callbacks follow on the loop thread (on_done
  /// exactly once, also for a request refused here).
  uint64_t exec(exec_request req, exec_callbacks cb);

  /// Asks init to SIGKILL the command's process group; its `done` follows.
  void cancel(uint64_t exec_id);

  /// Writes to the stdin of a command started with keep_stdin.
  status send_stdin(uint64_t exec_id, std::string_view data, bool close);

  /// Sets the size of the terminal of a command started with a pty.
  status resize_pty(uint64_t exec_id, uint16_t cols, uint16_t rows);

  // -- process table and signals (init_channel_procs.cpp) -------------------

  /// The sandbox's processes as init sees them.
  void processes(std::function<void(expected<std::vector<process_info>>)> done);

  /// The CPU time the sandbox's own kernel counts as busy, ns (a VM guest's
  /// /proc/stat; init_proto::msg::cpu_query). A container's would be the
  /// host's: ask guests only.
  void cpu_time(std::function<void(expected<int64_t>)> done);

  /// Signals one process (or its group) inside the sandbox.
  void signal_process(int32_t pid, int32_t signo, bool group, std::function<void(status)> done);

  // -- init's life ------------------------------------------------------------

  /// `f` hears once why init died on its own ("oom", "init exited: ..."); a
  /// listener that comes after the death hears at once.
  void on_exit(std::function<void(std::string reason)> f);

  /// True once init died or shut() ran.
  [[nodiscard]] bool gone() const;

  /// True once shut() ran.
  [[nodiscard]] bool is_shut() const;

  // -- ports (init_channel_ports.cpp; issue 26 part 3) ------------------------

  /// One end of a socket pair whose bytes init relays to 127.0.0.1:`port`
  /// inside the sandbox (protocol.hpp, port_open..port_opened): how a node
  /// reaches a port of a guest that has no network device. Nonblocking; a
  /// port nothing listens on shows as the socket closing unanswered.
  expected<sys::unique_fd> open_port(uint16_t port);

  /// Stops for good: closes the channel and stops watching init and OOM.
  /// Pending requests stay pending until fail_pending_later(). False if it
  /// ran before (the caller's teardown already ran or runs).
  bool shut();

  /// SIGKILLs init through its pidfd. A pid namespace's init takes every
  /// process of the sandbox with it.
  void kill_init();

  /// Waits up to 10 s for init to be gone, and reaps it when it is ours.
  void wait_init();

  /// Fails every pending exec and query with "sandbox destroyed", on the
  /// loop thread.
  void fail_pending_later();

 private:
  /// Answers one control request (ps, signal) from its frame; false for a
  /// malformed one. Runs on the loop thread, or with an error when the
  /// channel is gone.
  using query_fn = std::function<bool(const init_proto::header* h, std::string_view body,
                                      const error* err)>;

  struct pending_exec {
    exec_callbacks cb;
    exec_result result;
    size_t seen[2] = {0, 0}; ///< output bytes passed on per stream (cap: max_output)
    /// What `result`'s kept output took from the node's budget, given back
    /// when the exec is answered (core/output_budget.hpp).
    output_charge charge{&output_budget::node()};
    kept_stream streams[2];
  };

  /// The hello exchange of start(), before the loop watches the socket.
  status greet();
  /// On the loop thread: the channel closed while hello was unanswered (an
  /// init of version 1); connects again without hello. False if it cannot.
  bool reconnect_after_hello();

  // -- io_loop thread -------------------------------------------------------

  void on_channel(uint32_t events);
  void on_init_exit();
  void on_oom();
  bool handle_frame(const init_proto::header& h, std::string_view body);
  void fail_pending(const error& e);
  /// Sends a control request; `fn` gets its answer or an error.
  void send_query(const std::function<std::string(uint32_t id)>& encode, query_fn fn);
  std::string exit_reason();

  // -- any thread, m_ held --------------------------------------------------

  void flush_locked();
  void close_channel_locked();
  void unwatch_init_locked();

  std::shared_ptr<io_loop> loop_;
  channel_parts parts_;
  oom_watch oom_;

  mutable std::mutex m_;
  std::string out_;                 ///< frames not yet written to init
  uint32_t next_id_ = 1;
  std::map<uint32_t, std::shared_ptr<pending_exec>> pending_;
  std::map<uint32_t, query_fn> queries_; ///< ps and signal requests in flight
  std::function<void(std::string)> on_exit_;
  uint64_t ctl_token_ = 0, pid_token_ = 0, oom_token_ = 0;
  bool channel_open_ = true;
  bool dead_ = false; ///< init exited on its own
  /// The memory controller signalled an OOM and on_oom killed init for it:
  /// the death is "oom" even if the kernel had not counted a kill yet (it
  /// signals before it picks a victim, and a dying namespace may need none).
  bool oom_killed_ = false;
  bool shut_ = false;      ///< shut() ran (or runs)
  std::string death_;      ///< why exec fails now
  std::string died_of_;    ///< the reason on_exit reported (or would have)

  std::string in_; ///< bytes from init not yet parsed; loop thread only
  uint32_t version_ = 0; ///< agreed at hello; guarded by m_
  bool hello_pending_ = false; ///< hello sent, not answered (await_hello false)
  std::string mismatch_;       ///< why the versions do not meet, once known

  // -- ports (init_channel_ports.cpp) ----------------------------------------

  /// One relayed connection: the node's end of its socket pair.
  struct port_stream {
    sys::unique_fd fd;
    uint64_t token = 0;
    std::string out;        ///< from init, not yet written to fd
    bool sent_close = false; ///< our side's EOF went to init
    bool got_close = false;  ///< init's side ended
    uint32_t window = 0;     ///< 0: not flow controlled (an init before version 3)
    uint64_t in_flight = 0;  ///< bytes sent to init and not yet acknowledged
  };
  std::map<uint32_t, port_stream> ports_; ///< guarded by m_
  /// Loop thread: the socket of stream `id` is ready / a frame of a stream came.
  void on_port_socket(uint32_t id, uint32_t events);
  bool on_port_frame(const init_proto::header& h, std::string_view body);
  /// m_ held: writes what fd takes of `out`, re-arms, ends a finished stream.
  void port_write_locked(uint32_t id, port_stream& s);
  void drop_port_locked(uint32_t id);
  void close_ports_locked();
};

} // namespace dsec::backends
