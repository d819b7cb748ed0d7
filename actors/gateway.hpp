// The REST gateway actor: the only actor that knows HTTP. The Beast server
// (actors/http_server.hpp) hands it each parsed request; it maps the request to
// a route, asks the node's front actor (placement), and turns the answer or the error into
// JSON with the right status. Errors become `{"error":{"code","message"}}` in
// one function, reply_error().
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/http_server.hpp"
#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"

namespace dsec {

/// State of the gateway actor.
struct gateway_state {
  static inline const char* name = "gateway";
  node_context_ptr ctx;
  /// The placement actor: speaks the sandbox API, routes in the cluster.
  placement_actor front;
  int64_t requests_total = 0;
  int64_t errors_total = 0;
  /// Source of exec cancel tokens (0 means "not cancellable").
  uint64_t next_token = 1;
  /// Ports: the actor of each local sandbox a port request reached, asked
  /// directly next time (actors/gateway_ports.cpp); dropped on any error.
  std::unordered_map<std::string, sandbox_actor> port_owners;
};

using gateway_actor_ptr = gateway_actor::stateful_pointer<gateway_state>;

/// Takes (http_atom, http_call) messages from the HTTP server thread
/// (interfaces.hpp, gateway_actor).
gateway_actor::behavior_type gateway_behavior(gateway_actor_ptr self, node_context_ptr ctx,
                                              placement_actor front);

} // namespace dsec
