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
//
// The same form carries every long-running output (DESIGN.md §7b): a
// background command's output (the follow row: one producer, the sandbox
// actor, fans out to many sinks, a late one first gets what it missed) and a
// directory watch's changes (the watch row, chunks of the watch_* streams
// below).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include <caf/actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/fwd.hpp>
#include <caf/send.hpp>

#include "actors/atoms.hpp"
#include "core/clock.hpp"
#include "core/types.hpp"

namespace dsec {

/// exec_chunk::stream of the first chunk of every follow and watch (data
/// empty): the subscription is set, what it carries comes next. A sink that
/// answers a client commits its answer on it.
constexpr int32_t subscribed_stream = 0;
/// exec_chunk::stream of a watch's changes (watch_chunk); 1 and 2 are a
/// command's stdout and stderr.
constexpr int32_t watch_event_stream = 3;

/// A change as a chunk of watch_event_stream: data "<type>\n<name>", type one
/// of create, write, remove, rename, chmod; name relative to the directory.
exec_chunk watch_chunk(std::string_view type, std::string_view name);

/// The type and name of a watch_chunk (type empty if `c` is none).
std::pair<std::string, std::string> watch_chunk_parts(const exec_chunk& c);

/// A backend output callback that sends each chunk to `sink`, tagged `token`.
std::function<void(exec_chunk)> chunk_sender(caf::actor sink, uint64_t token);

/// A relay actor, spawned by `self`, that feeds every chunk sent to it to `fn`
/// (on the relay's thread, in order).
caf::actor spawn_chunk_relay(caf::local_actor* self, std::function<void(exec_chunk)> fn);

/// The same for a stream that may stay silent for long (a followed command,
/// a watch): `on_idle` runs on the relay's thread each time `every` passed
/// without a chunk (keepalives). It quits with the actor that spawned it, so
/// its timer never outlives the node.
caf::actor spawn_chunk_relay(caf::local_actor* self, std::function<void(exec_chunk)> fn,
                             std::chrono::milliseconds every, std::function<void()> on_idle);

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
