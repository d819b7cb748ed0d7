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

caf::actor spawn_chunk_relay(caf::local_actor* self, std::function<void(exec_chunk)> fn,
                             std::chrono::milliseconds every, std::function<void()> on_idle) {
  auto parent = caf::actor_cast<caf::actor>(self);
  return self->spawn([fn = std::move(fn), every, on_idle = std::move(on_idle),
                      parent](caf::event_based_actor* relay) -> caf::behavior {
    auto quiet = std::make_shared<bool>(true);
    relay->monitor(parent);
    relay->set_down_handler([relay](caf::down_msg&) { relay->quit(); });
    relay->delayed_send(relay, every, caf::tick_atom::value);
    return {
      [fn, quiet](stream_atom, uint64_t, exec_chunk& c) {
        *quiet = false;
        fn(std::move(c));
      },
      [relay, quiet, on_idle, every](caf::tick_atom) {
        if (*quiet)
          on_idle();
        *quiet = true;
        relay->delayed_send(relay, every, caf::tick_atom::value);
      },
      [relay](shutdown_atom) {
        relay->quit();
        return true;
      },
    };
  });
}

exec_chunk watch_chunk(std::string_view type, std::string_view name) {
  exec_chunk c;
  c.stream = watch_event_stream;
  c.data.reserve(type.size() + 1 + name.size());
  c.data.append(type).append(1, '\n').append(name);
  return c;
}

std::pair<std::string, std::string> watch_chunk_parts(const exec_chunk& c) {
  auto nl = c.data.find('\n');
  if (c.stream != watch_event_stream || nl == std::string::npos)
    return {};
  return {c.data.substr(0, nl), c.data.substr(nl + 1)};
}

} // namespace dsec
