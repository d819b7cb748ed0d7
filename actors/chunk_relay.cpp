// Streamed exec output (see chunk_relay.hpp).
#include "actors/chunk_relay.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "core/inspect.hpp"

namespace dsec {

std::function<void(exec_chunk)> chunk_sender(caf::actor sink, uint64_t token) {
  return [sink = std::move(sink), token](exec_chunk c) {
    caf::anon_send(sink, stream_atom::value, token, std::move(c));
  };
}

caf::actor spawn_chunk_relay(caf::local_actor* self, std::function<void(exec_chunk)> fn) {
  return self->spawn([fn = std::move(fn)](caf::event_based_actor* relay) -> caf::behavior {
    return {
      [fn](stream_atom, uint64_t, exec_chunk& c) { fn(std::move(c)); },
      [relay](shutdown_atom) {
        relay->quit();
        return true;
      },
    };
  });
}

} // namespace dsec
