// container_sandbox: the node's handle on one running container sandbox. It
// owns the cgroups, the overlay mount, the network state and the sandbox
// directory, and holds the init_channel to the sandbox's init (exec, stdin,
// the process table and signals run over it; an OOM in the cgroup kills
// init through it); destroy() releases them all. Internal to the container
// backend.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.hpp"
#include "backends/channel/channel_sandbox.hpp"
#include "backends/channel/init_channel.hpp"
#include "backends/channel/io_loop.hpp"
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

/// Exec, stdin, cancel, the process table, signals and the exit report come
/// from channel_sandbox.
class container_sandbox final : public channel_sandbox,
                                public std::enable_shared_from_this<container_sandbox> {
 public:
  // -- constructors ---------------------------------------------------------

  container_sandbox(std::shared_ptr<io_loop> loop, sandbox_parts parts);
  ~container_sandbox() override;

  /// Starts the channel and watches the cgroup for OOM. Call once, after
  /// construction through make_shared.
  status start();

  // -- sandbox interface ----------------------------------------------------

  status write_file(const std::string& path, std::string_view data, uint32_t mode) override;
  expected<std::string> read_file(const std::string& path, size_t max_bytes) override;
  expected<std::vector<fs_entry>> file_op(const std::string& op, const std::string& path,
                                          const std::string& to, int32_t depth) override;
  status destroy() override;
  int init_pid() const override { return parts_.pid; }

  // Power off (a pause that keeps the files only): container_pause.cpp.
  status power_off() override;
  bool powered_off() const override { return off_; }
  std::optional<bool> frozen() const override;

  /// A handle on a sandbox found powered off by recover(): its files only.
  void mark_powered_off();

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

  // CPU class (cgroup knobs + every task's policy, policy/cpu_class.hpp):
  // container_pause.cpp.
  status set_cpu_class(const std::string& cls) override;

  // Directory watches with inotify on the node's view of the root: dir_watch.cpp.
  expected<std::shared_ptr<dir_watch>> watch_dir(const std::string& path, bool recursive,
                                                 watch_callbacks cb) override;

  // A port inside its network namespace (issue 26 part 3): container_ports.cpp.
  expected<sys::unique_fd> open_port(uint16_t port) override;

 private:
  /// The root for one file call; null once destroy() ran.
  std::shared_ptr<sys::unique_fd> root_fd() const;

  /// Kills init and releases what the sandbox holds; its directory too
  /// unless `keep_files` (power_off). False if it was already torn down.
  bool tear_down(bool keep_files, status& first);

  std::shared_ptr<io_loop> loop_;
  sandbox_parts parts_; ///< its pidfd, ctl and env moved into channel_
  std::shared_ptr<sys::unique_fd> root_; ///< copied by file calls, dropped by destroy

  std::atomic<bool> off_{false}; ///< powered off: only its directory is left

  std::mutex destroy_m_;
  mutable std::mutex m_; ///< guards root_
};

/// The file in a powered-off sandbox's directory that says so, for
/// recover() and a boot again (container_backend.cpp).
inline constexpr const char* powered_off_marker = "powered-off";

/// Resolves `path` (absolute, no "..") below `root` with openat2 in-root
/// semantics; exposed for the file calls. Implemented in files.cpp.
status write_in_root(int root, const std::string& path, std::string_view data, uint32_t mode);
expected<std::string> read_in_root(int root, const std::string& path, size_t max_bytes);

} // namespace dsec::backends
