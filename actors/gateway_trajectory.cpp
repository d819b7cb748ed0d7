// REST routes of the trajectory log (see gateway_trajectory.hpp).
#include "actors/gateway_trajectory.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/json_codec.hpp"
#include "core/trajectory.hpp"

namespace dsec {

namespace {

/// Reading a log is a call like any other (a file read on the serving node,
/// which may be a peer); a replay re-runs a whole trajectory. Both are
/// front-hop bounds (core/clock.hpp), longer than placement's peer waits.
constexpr auto read_timeout = call_wait(hop::front);
constexpr auto replay_timeout = replay_wait(hop::front);

} // namespace

void handle_trajectory(gateway_actor_ptr self, const http_call& c, const route& r) {
  int64_t since = -1;
  if (auto it = r.query.find("since"); it != r.query.end()) {
    auto s = trajectory::parse_seq("since", it->second);
    if (!s)
      return gateway_reply_error(c, s.err());
    since = *s;
  }
  self->request(self->state.front, read_timeout, traj_atom::value, r.id, since)
    .then([c](std::string& text) { gateway_reply(c, 200, std::move(text), "application/x-ndjson"); },
          [c](caf::error& err) { gateway_reply_error(c, from_caf(err)); });
}

void handle_replay(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto upto = trajectory::parse_replay(c->body);
  if (!upto)
    return gateway_reply_error(c, upto.err());
  if (auto it = r.query.find("upto_seq"); it != r.query.end()) {
    auto q = trajectory::parse_seq("upto_seq", it->second);
    if (!q)
      return gateway_reply_error(c, q.err());
    upto = *q;
  }
  self->request(self->state.front, replay_timeout, replay_atom::value, r.id, *upto)
    .then([c](sandbox_info& info) { gateway_reply(c, 201, json_codec::encode(info), "application/json"); },
          [c](caf::error& err) { gateway_reply_error(c, from_caf(err)); });
}

} // namespace dsec
