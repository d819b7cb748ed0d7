// port_route: how a node reaches a TCP port inside one sandbox (issue 26,
// ports). The sandbox's owner answers the port operation with it: which node
// owns the sandbox and that node's REST address (a peer relays the request
// there), the per-sandbox traffic token a request must carry (empty: none),
// and, for a gateway on the owner itself, the backend handle that opens the
// connection. The handle is never serialized: a remote caller gets it empty.
#pragma once

#include <any>
#include <memory>
#include <string>

#include <caf/meta/type_name.hpp>

namespace dsec::backends {
class sandbox;
}

namespace dsec {

/// Where a port of a sandbox is served (actors/operations.hpp, port_op).
struct port_route {
  /// The owner node's id and its REST host:port.
  std::string node;
  std::string rest;
  /// The value `e2b-traffic-access-token` must have; empty: no token needed.
  std::string traffic_token;
  /// The sandbox's backend ("container", "microvm", ...), for messages.
  std::string backend;
  /// Its ports answer requests without an API key (public_ports_label; E2B's
  /// default, unless the create set network.allowPublicTraffic false).
  bool public_ports = false;
  /// On the owner only: the backend handle (local messages are not
  /// serialized, so it survives placement's hop to the local lifecycle).
  std::weak_ptr<backends::sandbox> local;
  /// On the owner only: the sandbox's actor (a caf::actor, kept out of this
  /// CAF-free header), which the owner's gateway asks directly for the next
  /// request to the sandbox (actors/gateway_ports.cpp). Never serialized.
  std::any actor;
  /// The Host header requests to the port carry (core/host_mask.hpp, E2B's
  /// maskRequestHost, `${PORT}` not yet replaced); empty: as sent.
  std::string host_mask;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, port_route& x) {
  return f(caf::meta::type_name("dsec::port_route"), x.node, x.rest, x.traffic_token, x.backend,
           x.public_ports, x.host_mask);
}

/// The label whose value is a sandbox's traffic token (E2B's
/// `network.allowPublicTraffic: false`, or set by any creator).
inline constexpr const char* traffic_token_label = "dsec.traffic_token";
/// A sandbox label: "true" lets requests without an API key reach its ports
/// (E2B's public traffic; the traffic token, if any, still applies).
inline constexpr const char* public_ports_label = "dsec.public_ports";

} // namespace dsec
