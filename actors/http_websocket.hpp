// WebSockets (RFC 6455) on the gateway's HTTP server: a request that asks
// for an upgrade can be taken over by the gateway (http_exchange::
// upgrade_websocket), which then gets whole messages and sends its own.
// Beast does the framing, masking, ping/pong and close handshake on the
// server's Asio thread; this header knows none of it.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace dsec {

/// What an accepted WebSocket tells its owner; both run on the server's
/// thread and must not block.
struct ws_handlers {
  /// One whole message from the client (`binary` false: a text frame).
  std::function<void(std::string data, bool binary)> on_message;
  /// Once, when the socket is gone (either side closed, or it broke).
  std::function<void()> on_close;
};

/// An open WebSocket. Thread-safe: sends are queued to the server's thread
/// and written in order; those made before the handshake ends wait for it.
class ws_conn {
 public:
  virtual ~ws_conn() = default;
  /// Sends one message (a binary frame, or text if `binary` is false).
  virtual void send(std::string data, bool binary) = 0;
  /// Sends what is queued, then closes (normal closure).
  virtual void close() = 0;
};

/// Largest message a client may send; a larger one closes the socket
/// ("message too big", 1009): a client cannot make the node buffer without
/// bound. Typed input and control messages are far smaller.
constexpr size_t max_ws_message = 1u << 20;

} // namespace dsec
