// The boundary between the pure gossip logic and the network. A memberlist only
// ever calls `send_packet` (a best-effort datagram, UDP in production) and
// `send_stream` (a large, reliable-if-possible message such as a push/pull, TCP
// or a CAF message in production); whoever owns the socket feeds received bytes
// back through memberlist::handle_packet / handle_stream. The in-memory network
// (memory_transport.hpp) implements it for tests and simulation.
#pragma once

#include "gossip/member.hpp"

#include <string>

namespace dsec::gossip {

/// Outgoing side of a node's network. Implementations must not call back into
/// the memberlist from inside send (queue the delivery instead).
class transport {
 public:
  virtual ~transport() = default;

  /// Sends one datagram of at most config::max_packet_size bytes; it may be
  /// lost, duplicated or reordered and nobody is told.
  virtual void send_packet(const std::string& to_address, bytes data) = 0;

  /// Sends a message of any size that should arrive whole (push/pull state).
  /// Failure is silent too: the protocol retries on its own timers.
  virtual void send_stream(const std::string& to_address, bytes data) = 0;
};

} // namespace dsec::gossip
