// Directory watches of one sandbox (see sandbox_watch.hpp).
#include "actors/sandbox_watch.hpp"

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/sandbox_ops.hpp"
#include "backends/backend.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

/// The watch `wid` ended by itself (backend thread -> actor).
void watch_ended(sandbox_actor_ptr self, uint64_t wid, const error& why) {
  auto& ws = self->state.watches;
  auto it = ws.find(wid);
  if (it == ws.end())
    return;
  it->second.rp.deliver(to_caf(why));
  ws.erase(it); // releases the handle on this thread, never on the loop's
}

} // namespace

void watch_dir(sandbox_actor_ptr self, caf::response_promise rp, std::string path, bool recursive,
               caf::actor sink, uint64_t token) {
  auto retry = [self, path, recursive, sink, token](caf::response_promise rp) {
    watch_dir(self, rp, path, recursive, sink, token);
  };
  if (!ready_for(self, rp, retry))
    return;
  auto& st = self->state;
  auto what = "watch " + path + " in sandbox " + st.info.id + " (" + st.spec.backend + " backend)";
  if (!sink)
    return rp.deliver(to_caf(invalid_argument(what + ": no sink to send its events to")));
  auto wid = ++st.next_waiter;
  auto hdl = caf::actor_cast<caf::actor>(self);
  backends::watch_callbacks cb;
  cb.on_event = [sink, token](backends::dir_event ev) {
    caf::anon_send(sink, stream_atom::value, token, watch_chunk(ev.type, ev.name));
  };
  cb.on_end = [hdl, self, wid, what](error why) {
    run_in(hdl, [self, wid, why = error{why.code, what + ": " + why.message}] {
      watch_ended(self, wid, why);
    });
  };
  // The handle owns a kernel watch: the actor stays until the job reports.
  ++st.inflight;
  run_blocking(
    self, *st.ctx->pool,
    [sb = st.sb, path, recursive, cb = std::move(cb), sink,
     token]() -> expected<std::shared_ptr<backends::dir_watch>> {
      auto w = sb->watch_dir(path, recursive, std::move(cb));
      if (!w)
        return w.err();
      // Sent before any event can be: events flow only after start().
      caf::anon_send(sink, stream_atom::value, token, exec_chunk{subscribed_stream, {}});
      (*w)->start();
      return w;
    },
    [self, rp, sink, wid, what](expected<std::shared_ptr<backends::dir_watch>>& res) mutable {
      auto& st = self->state;
      if (!res)
        rp.deliver(to_caf(error{res.err().code, what + ": " + res.err().message}));
      else if (st.destroying)
        rp.deliver(to_caf(not_running(st))); // the handle goes with `res`
      else {
        self->monitor(sink);
        st.watches[wid] = watch_entry{sink, rp, std::move(*res)};
      }
      end_op(self);
    });
}

void stop_watches_of(sandbox_actor_ptr self, const caf::actor_addr& sink) {
  auto& ws = self->state.watches;
  for (auto it = ws.begin(); it != ws.end();) {
    if (it->second.sink.address() == sink) {
      it->second.rp.deliver(true);
      it = ws.erase(it);
    } else {
      ++it;
    }
  }
}

void end_watches(sandbox_actor_ptr self, const error& why) {
  auto ws = std::move(self->state.watches);
  self->state.watches.clear();
  for (auto& [wid, w] : ws)
    w.rp.deliver(to_caf(why));
}

} // namespace dsec
