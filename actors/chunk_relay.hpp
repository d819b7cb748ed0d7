// Streamed exec output, in its one form: the stream request carries a sink
// actor, and every chunk reaches it as (stream_atom, token, exec_chunk)
// before the answer leaves the node that ran the command (interfaces.hpp,
// the stream row). The sandbox actor sends the chunks (chunk_sender); a
// remote client's actor is the sink itself; an in-process caller with a
// callback (the gateway) puts a relay actor in front of it.
//
// A relay is drained before its caller finishes: the chunks were sent before
// the answer, so a request queued behind them in the relay's mailbox is
// answered after the last chunk reached the callback, locally and across
// nodes alike (one connection, in order). An exit message would jump that
// queue and drop the last chunks.
#pragma once

#include <cstdint>
#include <functional>

#include <caf/actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/fwd.hpp>
#include <caf/send.hpp>

#include "actors/atoms.hpp"
#include "core/clock.hpp"
#include "core/types.hpp"

namespace dsec {

/// A backend output callback that sends each chunk to `sink`, tagged `token`.
std::function<void(exec_chunk)> chunk_sender(caf::actor sink, uint64_t token);

/// A relay actor, spawned by `self`, that feeds every chunk sent to it to `fn`
/// (on the relay's thread, in order).
caf::actor spawn_chunk_relay(caf::local_actor* self, std::function<void(exec_chunk)> fn);

/// Runs `then` inside `self` (any actor that requests, typed or not) once
/// every chunk already sent to `relay` reached its callback, and stops the
/// relay (at once if it does not answer within local_wait).
template <class Self>
void drain_chunk_relay(Self* self, caf::actor relay, std::function<void()> then) {
  self->request(relay, local_wait, shutdown_atom::value)
    .then([then](bool) { then(); },
          [then, relay](caf::error&) {
            caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
            then();
          });
}

} // namespace dsec
