// REST routes of shell sessions (issue 26 part 2; actors/sandbox_session.hpp):
//   POST   /v1/sandboxes/{id}/sessions            {"shell","cwd","env"} -> 201 session
//   GET    /v1/sandboxes/{id}/sessions            -> {"sessions":[...]}
//   POST   /v1/sandboxes/{id}/sessions/{sid}/run  {"cmd","timeout_s"} -> exec result
//   DELETE /v1/sandboxes/{id}/sessions/{sid}      -> {"closed":true}
// Each turns into one request to the front door (placement), which routes it
// to the sandbox's owner, as every per-sandbox route.
#pragma once

#include "actors/gateway.hpp"
#include "api/gateway_routes.hpp"

namespace dsec {

void handle_session_open(gateway_actor_ptr self, const http_call& c, const route& r);
void handle_session_list(gateway_actor_ptr self, const http_call& c, const route& r);
void handle_session_run(gateway_actor_ptr self, const http_call& c, const route& r);
void handle_session_close(gateway_actor_ptr self, const http_call& c, const route& r);

} // namespace dsec
