// Running a layer's start command (see sandbox_start.hpp).
#include "actors/sandbox_start.hpp"

#include <condition_variable>
#include <iostream>
#include <mutex>

namespace dsec {

void run_layer_start(const std::shared_ptr<backends::sandbox>& sb, const layer_config& defaults,
                     const std::string& node, const std::string& id) {
  if (defaults.start.empty() || !sb)
    return;
  struct readiness {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    void set() {
      std::lock_guard<std::mutex> lk(mu);
      ready = true;
      cv.notify_all();
    }
  };
  auto r = std::make_shared<readiness>();
  exec_request req;
  req.argv = defaults.start;
  req.cwd = defaults.workdir;
  req.user = defaults.user;
  backends::exec_callbacks cb;
  cb.on_output = [r](exec_chunk) { r->set(); };
  // Runs on a backend thread, maybe after the sandbox is gone: touches only
  // its own copies.
  cb.on_done = [r, node, id, cmd = defaults.start.front()](expected<exec_result> res) {
    r->set();
    if (res)
      std::cout << "dsec node " << node << ": sandbox " << id << ": layer start command "
                << cmd << " exited with " << res->exit_code << std::endl;
    else
      std::cout << "dsec node " << node << ": sandbox " << id << ": layer start command "
                << cmd << ": " << res.err().message << std::endl;
  };
  cb.keep_output = false;
  (void)sb->exec(std::move(req), std::move(cb));
  std::unique_lock<std::mutex> lk(r->mu);
  if (!r->cv.wait_for(lk, start_ready_wait, [&] { return r->ready; }))
    std::cout << "dsec node " << node << ": sandbox " << id << ": layer start command "
              << defaults.start.front() << " printed nothing in " << start_ready_wait.count()
              << " s; answering the create anyway" << std::endl;
}

} // namespace dsec
