// A small HTTP/1.1 server on Boost.Beast, run on its own Asio thread. It only
// parses requests (with header and body limits) and writes answers; what a
// request means is the gateway actor's business. Bodies over the limit get a
// 413, unparsable requests a 400, both as `{"error":{...}}`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/http_websocket.hpp"
#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec {

/// A complete (non-streamed) answer.
struct http_answer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// A request passed on to an upstream socket (http_exchange::relay; ports,
/// actors/gateway_ports.hpp).
struct relay_request {
  /// The request head and body as the upstream gets them.
  std::string bytes;
  /// The request asks for an upgrade (WebSocket): a 101 makes a tunnel.
  bool upgrade = false;
  /// A HEAD request: the answer has no body whatever its head says.
  bool head = false;
  /// What the upstream is ("port 8000 of sandbox n1.x"), in a 502's message.
  std::string what;
  /// Ports: the place the upstream connects to ("" = a connection of its own,
  /// closed after the answer). With a key, relay() may be given no socket: the
  /// relay takes an idle kept-alive connection to the same place, or opens one
  /// with `dial` (run on the port dialer thread, actors/port_dialer.hpp); a
  /// complete answer leaves the connection idle for the next request
  /// (actors/upstream_pool.hpp).
  std::string pool_key;
  std::function<expected<sys::unique_fd>()> dial;
};

/// One request awaiting its answer. Every method is thread-safe; the answer
/// is either one respond() or begin_stream(), write_chunk()*, end_stream().
class http_exchange {
 public:
  virtual ~http_exchange() = default;

  std::string method;
  /// Path and query, as sent ("/v1/sandboxes?label=a%3Db").
  std::string target;
  std::string body;
  /// Request headers in arrival order, names lower-cased.
  std::vector<std::pair<std::string, std::string>> headers;

  /// The first value of header `lower_name`, or "" if absent.
  std::string header(std::string_view lower_name) const {
    for (auto& [k, v] : headers)
      if (k == lower_name)
        return v;
    return {};
  }

  virtual void respond(http_answer answer) = 0;
  /// Starts a chunked answer.
  virtual void begin_stream(int status, std::string content_type) = 0;
  virtual void write_chunk(std::string data) = 0;
  virtual void end_stream() = 0;
  /// Calls `f` (on the server thread) if the client goes away before the
  /// answer is complete; at once if it already has. Used to cancel execs.
  virtual void on_disconnect(std::function<void()> f) = 0;
  /// Takes the connection over as a WebSocket if the request asked for one
  /// (Upgrade: websocket): instead of an answer, the handshake; null if it
  /// did not (answer it then). Terminals use it (actors/gateway_pty.hpp).
  virtual std::shared_ptr<ws_conn> upgrade_websocket(ws_handlers h) {
    (void)h;
    return nullptr;
  }
  /// Answers with what `upstream` (a connected or connecting stream socket)
  /// answers `req`, passed through as it arrives (actors/http_relay.hpp); a
  /// 101 turns the connection into a tunnel. If the upstream fails before
  /// answering, the answer is a 502 naming req.what and the cause.
  virtual void relay(sys::unique_fd upstream, relay_request req) = 0;
  /// Ends a chunked answer by closing the connection without its last
  /// chunk, so the client sees it dropped (E2B's envd when its sandbox is
  /// killed mid-stream; the SDK then asks /health and reports the sandbox
  /// gone). Chunks written before are sent first.
  virtual void abort_stream() { end_stream(); }
};

using http_call = std::shared_ptr<http_exchange>;
using http_handler = std::function<void(http_call)>;

/// The listening server and its Asio thread.
class http_server {
 public:
  virtual ~http_server() = default;
  /// The bound port (useful with port 0).
  virtual uint16_t port() const = 0;
  /// Stops accepting, closes connections, joins the thread.
  virtual void stop() = 0;
};

/// Binds host:port and starts serving; `handler` runs on the Asio thread and
/// must not block (the gateway's only anon_sends).
expected<std::unique_ptr<http_server>> start_http_server(const std::string& host, uint16_t port,
                                                         size_t max_body_bytes,
                                                         http_handler handler);

} // namespace dsec
