// container_sandbox: the node's handle on one running container sandbox. It
// owns the control channel to init (frames out from any thread, frames in on
// the io_loop thread), the pidfd of init, the cgroups, the overlay mount and
// the sandbox directory; destroy() releases them all. Internal to the
// container backend.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.hpp"
#include "backends/container/io_loop.hpp"
#include "backends/init/protocol.hpp"
#include "backends/net/sandbox_net.hpp"
#include "sys/cgroup.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// Everything create() or recover() acquired, handed to the sandbox.
struct sandbox_parts {
  std::string id;
  std::string dir;
  pid_t pid = -1;
  /// True if init is our child (create) and must be reaped with waitid.
  bool reap = true;
  sys::unique_fd pidfd;
  sys::unique_fd ctl;
  sys::unique_fd rootfs; ///< the node's view of the root (a detached clone of its mount)
  std::unique_ptr<sys::cgroup> cgroup;
  std::map<std::string, std::string> env; ///< spec env, under each exec's env
  /// Network policy and denial counters (container_net.cpp); null only in
  /// the moments before join_network().
  std::unique_ptr<net::sandbox_net> net;
};

class container_sandbox final : public sandbox,
                                public std::enable_shared_from_this<container_sandbox> {
 public:
  // -- constructors ---------------------------------------------------------

  container_sandbox(std::shared_ptr<io_loop> loop, sandbox_parts parts);
  ~container_sandbox() override;

  /// Registers the channel and pidfd with the loop. Call once, after
  /// construction through make_shared.
  status start();

  // -- sandbox interface ----------------------------------------------------

  uint64_t exec(exec_request req, exec_callbacks cb) override;
  void cancel(uint64_t exec_id) override;
  status send_stdin(uint64_t exec_id, std::string_view data, bool close) override;
  status write_file(const std::string& path, std::string_view data, uint32_t mode) override;
  expected<std::string> read_file(const std::string& path, size_t max_bytes) override;
  expected<std::vector<fs_entry>> file_op(const std::string& op, const std::string& path,
                                          const std::string& to, int32_t depth) override;
  void on_exit(std::function<void(std::string reason)> f) override;
  status destroy() override;
  int init_pid() const override { return parts_.pid; }

  // Pause and snapshot: container_pause.cpp.
  status pause() override;
  status resume() override;
  expected<std::string> changes_dir() override;

  // Usage and reclaim of cold memory: container_reclaim.cpp.
  expected<usage_sample> usage() override;
  expected<int64_t> reclaim() override;

  // Network policy and denial counters: container_net.cpp.
  status set_network(const network_policy& policy) override;
  denial_counts denials() override;

  // CPU class (cgroup knobs + every task's policy): cpu_class.cpp.
  status set_cpu_class(const std::string& cls) override;

  // Process table and signals through init: container_procs.cpp.
  void processes(std::function<void(expected<std::vector<process_info>>)> done) override;
  void signal_process(int32_t pid, int32_t signo, bool group,
                      std::function<void(status)> done) override;

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
  };

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

  std::shared_ptr<io_loop> loop_;
  sandbox_parts parts_;
  std::shared_ptr<sys::unique_fd> root_; ///< copied by file calls, dropped by destroy

  std::mutex destroy_m_;
  mutable std::mutex m_;
  std::string out_;                 ///< frames not yet written to init
  uint32_t next_id_ = 1;
  std::map<uint32_t, std::shared_ptr<pending_exec>> pending_;
  std::map<uint32_t, query_fn> queries_; ///< ps and signal requests in flight
  std::function<void(std::string)> on_exit_;
  uint64_t ctl_token_ = 0, pid_token_ = 0, oom_token_ = 0;
  /// Readable when the memory controller hits OOM: the whole sandbox is then
  /// killed and reported failed with reason "oom".
  sys::unique_fd oom_fd_;
  bool channel_open_ = true;
  bool dead_ = false;      ///< init exited on its own
  /// The memory controller signalled an OOM and on_oom killed init for it:
  /// the death is "oom" even if the kernel had not counted a kill yet (it
  /// signals before it picks a victim, and a dying namespace may need none).
  bool oom_killed_ = false;
  bool destroyed_ = false; ///< destroy() ran (or runs)
  std::string death_;      ///< why exec fails now
  std::string died_of_;    ///< the reason on_exit reported (or would have)

  std::string in_; ///< bytes from init not yet parsed; loop thread only
};

/// The error code a file call answers for `err` (errno): not_found,
/// invalid_argument for paths that are not plain files or leave the root,
/// conflict for a running binary, too_large, resource_exhausted for a full
/// quota, internal otherwise. Implemented in files.cpp; VM file calls use it.
errc file_errc(int err);

/// Splits an absolute sandbox path into its components; refuses relative
/// paths, "..", NUL bytes and the root itself (invalid_argument naming it).
/// Implemented in files.cpp; the VM backend checks paths with it too.
expected<std::vector<std::string>> split_sandbox_path(const std::string& path);

/// Resolves `path` (absolute, no "..") below `root` with openat2 in-root
/// semantics; exposed for the file calls. Implemented in files.cpp.
status write_in_root(int root, const std::string& path, std::string_view data, uint32_t mode);
expected<std::string> read_in_root(int root, const std::string& path, size_t max_bytes);

} // namespace dsec::backends
