// channel_sandbox: what every sandbox whose init speaks the channel protocol
// answers the same way, written once. Container sandboxes and VM guests run
// the same dsec-init (PID 1 of a container, the guest's agent in a VM), so
// exec with its output, stdin, cancel, the process table, signals and the
// news of init's death all go over one init_channel, whichever backend holds
// it. The derived handles keep what differs: files, pause, usage, destroy.
// An operation added to the channel is added here, and both backends have it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "backends/channel/init_channel.hpp"

namespace dsec::backends {

/// A sandbox whose exec, stdin, cancel, process table, signals and exit
/// report run over `channel_`. Thread-safe as the channel is.
class channel_sandbox : public sandbox {
 public:
  // -- over the channel -----------------------------------------------------

  uint64_t exec(exec_request req, exec_callbacks cb) override;
  void cancel(uint64_t exec_id) override;
  status send_stdin(uint64_t exec_id, std::string_view data, bool close) override;
  status resize_pty(uint64_t exec_id, uint16_t cols, uint16_t rows) override;
  void processes(std::function<void(expected<std::vector<process_info>>)> done) override;
  void signal_process(int32_t pid, int32_t signo, bool group,
                      std::function<void(status)> done) override;
  /// Init's death, as the channel reports it; a derived handle may override
  /// to give a better reason (a VM: why QEMU ended).
  void on_exit(std::function<void(std::string reason)> f) override;
  /// A port through init (ports, init_channel_ports.cpp): a guest's way;
  /// a container makes its socket in its network namespace instead.
  expected<sys::unique_fd> open_port(uint16_t port) override;

 protected:
  // -- constructors ---------------------------------------------------------

  /// `channel` may be null until the derived handle's start() builds it;
  /// no operation runs before that.
  explicit channel_sandbox(std::shared_ptr<init_channel> channel = nullptr);

  /// The control channel to the sandbox's init.
  std::shared_ptr<init_channel> channel_;
};

} // namespace dsec::backends
