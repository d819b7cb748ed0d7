// Terminals of one sandbox (see sandbox_pty.hpp). Input and resizes go to
// init at once (the backend queues them, never blocks); the checks that
// make a client's mistake a clear 404 or 409 are here, by pid.
#include "actors/sandbox_pty.hpp"

#include <caf/all.hpp>

#include "actors/caf_error.hpp"
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_procs.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

/// The running terminal `pid`, or the error that names why not.
expected<background_entry*> running_pty(sandbox_actor_state& st, int32_t pid, const char* what) {
  auto name = std::string(what) + " terminal " + std::to_string(pid) + " in " + st.info.id;
  auto it = st.background.find(pid);
  if (it == st.background.end() || !it->second.pty)
    return not_found(name + ": no such terminal");
  if (!it->second.proc.running)
    return conflict(name + ": it exited with code "
                    + std::to_string(it->second.proc.result.exit_code));
  return &it->second;
}

} // namespace

void open_pty(sandbox_actor_ptr self, caf::response_promise rp, exec_request req, int32_t cols,
              int32_t rows) {
  // Sizes were checked at the owner (ops::pty_open_op::check).
  start_background(self, std::move(rp), std::move(req), true, uint16_t(cols), uint16_t(rows));
}

void write_pty(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid, std::string data) {
  auto retry = [self, pid, data](caf::response_promise rp) { write_pty(self, rp, pid, data); };
  if (!ready_for(self, rp, retry))
    return;
  auto e = running_pty(self->state, pid, "write to");
  if (!e)
    return rp.deliver(to_caf(e.err()));
  if (data.empty())
    return rp.deliver(true);
  auto res = self->state.sb->send_stdin((*e)->exec_id, data, false);
  if (res)
    rp.deliver(true);
  else
    rp.deliver(to_caf(res.err()));
}

void resize_pty(sandbox_actor_ptr self, caf::response_promise rp, int32_t pid, int32_t cols,
                int32_t rows) {
  auto retry = [self, pid, cols, rows](caf::response_promise rp) {
    resize_pty(self, rp, pid, cols, rows);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto e = running_pty(self->state, pid, "resize");
  if (!e)
    return rp.deliver(to_caf(e.err()));
  auto res = self->state.sb->resize_pty((*e)->exec_id, uint16_t(cols), uint16_t(rows));
  if (res)
    rp.deliver(true);
  else
    rp.deliver(to_caf(res.err()));
}

void pty_output(background_entry& e, exec_chunk& c) {
  c.stream = pty_stream;
  auto& kept = e.proc.result.stdout_data;
  kept += c.data;
  if (kept.size() > pty_scrollback)
    kept.erase(0, kept.size() - pty_scrollback);
  e.runs.assign(1, {pty_stream, kept.size()});
  for (auto& f : e.followers)
    caf::anon_send(f.sink, stream_atom::value, f.token, c);
}

} // namespace dsec
