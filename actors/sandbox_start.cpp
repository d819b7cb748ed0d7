// Running a layer's start command (see sandbox_start.hpp).
#include "actors/sandbox_start.hpp"

#include <iostream>

#include "actors/sandbox_ops.hpp"

namespace dsec {

void run_layer_start(sandbox_actor_state& st, const std::vector<std::string>& argv) {
  if (argv.empty() || !st.sb)
    return;
  exec_request req;
  req.argv = argv;
  apply_exec_defaults(st, req);
  backends::exec_callbacks cb;
  cb.on_output = [](exec_chunk) {};
  // Runs on a backend thread, maybe after the actor is gone: touches only
  // its own copies.
  cb.on_done = [node = st.ctx->config.node_id, id = st.info.id,
                cmd = argv.front()](expected<exec_result> res) {
    if (res)
      std::cout << "dsec node " << node << ": sandbox " << id << ": layer start command "
                << cmd << " exited with " << res->exit_code << std::endl;
  };
  cb.keep_output = false;
  (void)st.sb->exec(std::move(req), std::move(cb));
}

} // namespace dsec
