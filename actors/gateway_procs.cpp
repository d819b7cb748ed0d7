// REST follow of a background command (see gateway_procs.hpp).
#include "actors/gateway_procs.hpp"

#include <atomic>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/gateway_trajectory.hpp"
#include "actors/interfaces.hpp"
#include "core/inspect.hpp"
#include "core/json_codec.hpp"

namespace dsec {

namespace {

/// One follow: whether the 200 went out (the subscribed chunk commits it, so
/// a missing pid is still a plain 404).
struct follow_state {
  std::atomic<bool> started{false};
};

} // namespace

void handle_follow_process(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto fs = std::make_shared<follow_state>();
  // The relay's thread writes the chunks; the answer is written once they
  // all went out (actors/chunk_relay.hpp).
  auto relay = spawn_chunk_relay(self, [c, fs](exec_chunk chunk) {
    if (chunk.stream == subscribed_stream) {
      if (!fs->started.exchange(true))
        c->begin_stream(200, "application/x-ndjson");
      return;
    }
    c->write_chunk(json_codec::encode_event(chunk));
  });
  // A client that goes away unsubscribes (the sandbox actor monitors the
  // relay); the command goes on.
  c->on_disconnect([relay] { caf::anon_send_exit(relay, caf::exit_reason::user_shutdown); });
  auto token = self->state.next_token++;
  // No bound: the answer comes when the command ends, however long it runs
  // (placement fails it at once if the owner's connection drops).
  self->request(self->state.front, caf::infinite, follow_atom::value, r.id, r.pid, relay, token)
    .then(
      [self, c, fs, relay](background_process& p) {
        drain_chunk_relay(self, relay, [c, fs, res = std::move(p.result)] {
          if (!fs->started.exchange(true))
            c->begin_stream(200, "application/x-ndjson");
          c->write_chunk(json_codec::encode_exit_event(res));
          c->end_stream();
        });
      },
      [self, c, fs, relay](caf::error& err) {
        drain_chunk_relay(self, relay, [c, fs, err = from_caf(err)] {
          if (!fs->started.exchange(true))
            return gateway_reply_error(c, err);
          c->write_chunk(json_codec::encode(err) + "\n");
          c->end_stream();
        });
      });
}

} // namespace dsec
