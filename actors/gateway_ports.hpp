// Ports (issue 26 part 3): a request on the REST port that names a port
// inside a sandbox is passed through to that port, answer streamed back as
// it comes, WebSocket upgrades tunnelled (actors/http_relay.hpp). Three forms
// name the port:
//   - the path  /v1/sandboxes/{id}/ports/{port}/{path...}  (the port sees
//     /{path...} with the query);
//   - E2B's host form: Host `{port}-{id}.{domain}` with the node's
//     --sandbox-domain (the port sees the target as sent);
//   - E2B's client-proxy headers E2b-Sandbox-Id and E2b-Sandbox-Port with a
//     port other than envd's 49983, which the node serves itself.
// Access: the node's API keys (X-API-Key, Bearer) or the sandbox's envd
// token (X-Access-Token), and, for a sandbox with a traffic token, header
// e2b-traffic-access-token. The sandbox's owner says where the port is
// (ops::port_op); on the owner the relay takes a kept-alive connection to
// that port or has the port dialer thread open one through the backend (a
// container's network namespace, a guest's init), so a `network: none`
// sandbox is reachable and gains no network; on any other peer the request
// goes, unchanged, to the owner's REST port (over kept-alive connections
// too). The owner's gateway remembers each local sandbox's actor and asks it
// directly for the next request's route: the same answer as through the
// front (the access checks run on it every time, a paused sandbox resumes),
// two messages fewer; any error forgets it and asks the front.
#pragma once

#include "actors/gateway.hpp"

namespace dsec::ports {

/// Serves `c` and returns true if it names a port inside a sandbox.
bool dispatch(gateway_actor_ptr self, const http_call& c);

} // namespace dsec::ports
