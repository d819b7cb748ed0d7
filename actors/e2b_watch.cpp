// envd's WatchDir (filesystem.Filesystem): the backend's changes to a
// directory (inotify on a container's root) pushed to the client as they
// come, in order, each with its entry when the call asks (`includeEntry`,
// envd 0.6.3). The entry is the changed path's Stat, taken when its event
// reaches the gateway, best effort as in E2B's envd: a path already gone
// (a remove, the old name of a rename) has none.
#include <atomic>
#include <memory>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/e2b_envd_stream.hpp"
#include "actors/e2b_identity.hpp"
#include "api/e2b_codec.hpp"
#include "core/clock.hpp"
#include "core/fs_entry_inspect.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

/// Bound on one entry's Stat through the front door (core/clock.hpp).
constexpr auto stat_timeout = call_wait(hop::front);

/// E2B's EventType name of a watch chunk's type (actors/chunk_relay.hpp).
const char* event_type(const std::string& type) {
  if (type == "create")
    return "EVENT_TYPE_CREATE";
  if (type == "write")
    return "EVENT_TYPE_WRITE";
  if (type == "remove")
    return "EVENT_TYPE_REMOVE";
  if (type == "rename")
    return "EVENT_TYPE_RENAME";
  return "EVENT_TYPE_CHMOD";
}


/// Where an event's entry comes from: the sandbox, the watched directory
/// and the sandbox's owner names; null when the call did not ask.
struct entry_source {
  placement_actor front;
  std::string id;
  std::string dir;
  owner_names names;
};

/// The path of event `name` (relative to the watched directory `dir`).
std::string event_path(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

/// The relay a watch's chunks are sent to (the protocol of chunk_relay.hpp:
/// stream chunks, shutdown answered after the last one, keepalives when
/// silent, gone with the gateway). With `src`, each event that is not a
/// remove waits for its Stat before it is written (`await`: later chunks,
/// and the shutdown that drains the relay, wait behind it), so events keep
/// their order.
caf::actor spawn_watch_relay(gateway_actor::pointer parent_self, const http_call& c,
                             std::shared_ptr<std::atomic<bool>> open,
                             std::shared_ptr<const entry_source> src) {
  auto parent = caf::actor_cast<caf::actor>(parent_self);
  auto every = std::chrono::duration_cast<std::chrono::milliseconds>(keepalive_every);
  return parent_self->spawn([c, open, src, parent,
                             every](caf::event_based_actor* relay) -> caf::behavior {
    auto quiet = std::make_shared<bool>(true);
    relay->monitor(parent);
    relay->set_down_handler([relay](caf::down_msg&) { relay->quit(); });
    relay->delayed_send(relay, every, caf::tick_atom::value);
    return {
      [relay, c, open, src, quiet](stream_atom, uint64_t, exec_chunk& chunk) {
        *quiet = false;
        if (chunk.stream == subscribed_stream && !open->exchange(true)) {
          c->begin_stream(200, connect_json);
          c->write_chunk(envelope(0, R"({"start":{}})"));
          return;
        }
        auto [type, name] = watch_chunk_parts(chunk);
        if (type.empty())
          return;
        if (!src || type == "remove")
          return c->write_chunk(envelope(0, watch_event(name, event_type(type))));
        relay
          ->request(src->front, stat_timeout, fsop_atom::value, src->id, std::string{fs_ops::stat},
                    event_path(src->dir, name), std::string{}, int32_t{1})
          .await(
            [c, src, name = name, type = type](std::vector<fs_entry>& v) {
              if (v.empty())
                return c->write_chunk(envelope(0, watch_event(name, event_type(type))));
              c->write_chunk(envelope(0, watch_event(name, event_type(type), v.front(),
                                                     &src->names)));
            },
            [c, name = name, type = type](caf::error&) {
              c->write_chunk(envelope(0, watch_event(name, event_type(type))));
            });
      },
      [relay, c, open, quiet, every](caf::tick_atom) {
        if (*quiet && *open)
          c->write_chunk(envelope(0, R"({"keepalive":{}})"));
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

/// Sets the watch of `req` and follows it into the stream (`src` as above).
void start_watch(const gateway_ref& g, const http_call& c, const std::string& id,
                 const fs_request& req, std::shared_ptr<const entry_source> src) {
  // parse_watch reads `recursive` as a depth: more than one level is recursive.
  bool recursive = req.depth > 1;
  auto open = std::make_shared<std::atomic<bool>>(false);
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto relay = spawn_watch_relay(g.self, c, open, std::move(src));
  c->on_disconnect([relay] { caf::anon_send_exit(relay, caf::exit_reason::user_shutdown); });
  auto self = g.self;
  // Ends the stream with a clean end-of-stream, once (the deadline and the
  // watch's own end may race).
  std::function<void()> end_cleanly = [c, open, done] {
    if (done->exchange(true))
      return;
    if (!open->exchange(true))
      c->begin_stream(200, connect_json);
    c->write_chunk(end_of_stream());
    c->end_stream();
  };
  // The client's deadline ends the stream cleanly; the watch ends with the
  // relay (the sandbox actor monitors it).
  auto tmo = c->header("connect-timeout-ms");
  if (!tmo.empty() && tmo.size() < 12 && tmo.find_first_not_of("0123456789") == std::string::npos
      && std::stoll(tmo) > 0)
    self->delayed_send(self, std::chrono::milliseconds(std::stoll(tmo)), cont_atom::value,
                       continuation{[self, relay, end_cleanly] {
                         drain_chunk_relay(self, relay, end_cleanly);
                       }});
  // No bound: answered when the watch ends.
  self->request(g.front, caf::infinite, watch_atom::value, id, req.path, recursive, relay,
                uint64_t{0})
    .then(
      [self, relay, end_cleanly](bool) { drain_chunk_relay(self, relay, end_cleanly); },
      [self, c, relay, open, done](caf::error& err) {
        drain_chunk_relay(self, relay, [c, open, done, e = from_caf(err)] {
          if (done->exchange(true))
            return;
          if (!open->exchange(true))
            return stream_error(c, e);
          c->write_chunk(end_of_stream(connect_code(e.code), e.message));
          c->end_stream();
        });
      });
}

} // namespace

/// WatchDir: the backend's events are pushed to a relay that writes each as
/// it comes; the stream opens with the start event once the watch is set,
/// and ends at the client's deadline (connect-timeout-ms), when the client
/// leaves, or with the watch.
void watch_dir(const gateway_ref& g, const http_call& c, const std::string& id,
               const envd_identity& who) {
  auto msg = stream_message(c);
  if (!msg)
    return stream_error(c, msg.err());
  auto req = parse_watch(*msg, who.home);
  if (!req)
    return stream_error(c, req.err());
  if (!req->include_entry)
    return start_watch(g, c, id, *req, nullptr);
  // Entries name their owners as the sandbox does: its names, read once.
  with_owner_names(g, id, who, [g, c, id, req = *req](owner_names names) {
    auto src = std::make_shared<entry_source>(entry_source{g.front, id, req.path, std::move(names)});
    start_watch(g, c, id, req, std::move(src));
  });
}

} // namespace dsec::e2b
