// REST routes of shell sessions (see gateway_session.hpp).
#include "actors/gateway_session.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/gateway_trajectory.hpp"
#include "actors/operations.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/json_codec.hpp"
#include "core/json_codec_session.hpp"
#include "core/session_inspect.hpp"

namespace dsec {

namespace {

auto on_error(http_call c) {
  return [c](caf::error& err) { gateway_reply_error(c, from_caf(err)); };
}

} // namespace

void handle_session_open(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto body = json_codec::parse_session_open(c->body);
  if (!body)
    return gateway_reply_error(c, body.err());
  self->request(self->state.front, call_wait(hop::front), sopen_atom::value, r.id,
                std::move(body->shell), std::move(body->cwd), std::move(body->env))
    .then([c](session_info& s) {
            gateway_reply(c, 201, json_codec::encode(s), "application/json");
          },
          on_error(c));
}

void handle_session_list(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, call_wait(hop::front), slist_atom::value, r.id)
    .then([c](std::vector<session_info>& list) {
            gateway_reply(c, 200, json_codec::encode(list), "application/json");
          },
          on_error(c));
}

void handle_session_run(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto body = json_codec::parse_session_run(c->body);
  if (!body)
    return gateway_reply_error(c, body.err());
  caf::duration bound = caf::infinite;
  if (auto wait = ops::session_run_op::deadline(ops::waits_of(hop::front), r.session, body->cmd,
                                                body->timeout_s))
    bound = caf::duration{*wait};
  self->request(self->state.front, bound, srun_atom::value, r.id, r.session,
                std::move(body->cmd), body->timeout_s)
    .then([c](exec_result& res) {
            gateway_reply(c, 200, json_codec::encode(res), "application/json");
          },
          on_error(c));
}

void handle_session_close(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, call_wait(hop::front), sclose_atom::value, r.id, r.session)
    .then([c](bool) { gateway_reply(c, 200, "{\"closed\":true}", "application/json"); },
          on_error(c));
}

} // namespace dsec
