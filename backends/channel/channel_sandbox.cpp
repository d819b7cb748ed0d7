// The operations every channel-backed sandbox shares (see channel_sandbox.hpp):
// each passes straight to the init_channel.
#include "backends/channel/channel_sandbox.hpp"

namespace dsec::backends {

channel_sandbox::channel_sandbox(std::shared_ptr<init_channel> channel)
  : channel_(std::move(channel)) {}

uint64_t channel_sandbox::exec(exec_request req, exec_callbacks cb) {
  return channel_->exec(std::move(req), std::move(cb));
}

void channel_sandbox::cancel(uint64_t exec_id) { channel_->cancel(exec_id); }

status channel_sandbox::send_stdin(uint64_t exec_id, std::string_view data, bool close) {
  return channel_->send_stdin(exec_id, data, close);
}

status channel_sandbox::resize_pty(uint64_t exec_id, uint16_t cols, uint16_t rows) {
  return channel_->resize_pty(exec_id, cols, rows);
}

void channel_sandbox::processes(std::function<void(expected<std::vector<process_info>>)> done) {
  channel_->processes(std::move(done));
}

void channel_sandbox::signal_process(int32_t pid, int32_t signo, bool group,
                                     std::function<void(status)> done) {
  channel_->signal_process(pid, signo, group, std::move(done));
}

void channel_sandbox::on_exit(std::function<void(std::string)> f) {
  channel_->on_exit(std::move(f));
}

} // namespace dsec::backends
