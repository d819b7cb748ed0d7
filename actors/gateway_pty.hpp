// REST terminals (issue 26 part 1), on the owner's terminal operations
// (actors/sandbox_pty.hpp) through any peer:
//   POST /v1/sandboxes/{id}/pty            {"cmd","cols","rows","env","cwd"} -> 201 process
//   GET  /v1/sandboxes/{id}/pty?cols=&rows=&cmd=&cwd=   WebSocket: opens one and carries it
//   GET  /v1/sandboxes/{id}/pty/{pid}      WebSocket: attaches (scrollback first);
//                                          without an upgrade: its state as a process
//   POST /v1/sandboxes/{id}/pty/{pid}/input   raw body typed at the terminal
//   POST /v1/sandboxes/{id}/pty/{pid}/resize  {"cols","rows"}
//   POST /v1/sandboxes/{id}/pty/{pid}/kill    SIGKILL to its process group
// On the WebSocket, binary messages are terminal bytes both ways; text
// messages are JSON control: from the client {"type":"resize","cols","rows"},
// {"type":"input","data"}, {"type":"kill"}; from the node
// {"type":"started","pid"}, {"type":"exit","exit_code"}, {"type":"error",
// "code","message"}.
#pragma once

#include "actors/gateway.hpp"
#include "api/gateway_routes.hpp"

namespace dsec {

/// Serves every pty_* route.
void handle_pty(gateway_actor_ptr self, const http_call& c, const route& r);

} // namespace dsec
