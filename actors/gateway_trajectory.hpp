// REST routes of the trajectory log: GET /v1/sandboxes/{id}/trajectory
// (NDJSON, `?since=SEQ` for the records after SEQ) and POST
// /v1/sandboxes/{id}/replay (a new sandbox rebuilt from the log, 201).
#pragma once

#include <string>

#include "actors/gateway.hpp"
#include "api/gateway_routes.hpp"

namespace dsec {

void handle_trajectory(gateway_actor_ptr self, const http_call& c, const route& r);
void handle_replay(gateway_actor_ptr self, const http_call& c, const route& r);

// -- from gateway.cpp -----------------------------------------------------------

void gateway_reply(const http_call& c, int status, std::string body, std::string content_type);
/// The one place where an error becomes an HTTP answer (reply_error).
void gateway_reply_error(const http_call& c, const error& err);

} // namespace dsec
