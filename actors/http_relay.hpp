// The byte relay behind ports (issue 26 part 3): one HTTP request of a
// client connection passed on to an upstream stream socket (a port inside a
// sandbox, or the owner node's REST port), and its answer passed back as it
// arrives. Nothing is buffered whole: each read from the upstream is written
// to the client before the next read, so a streamed answer (chunked, NDJSON,
// server-sent events) reaches the client as the upstream produces it, and a
// slow client slows the upstream instead of filling the node's memory. A 101
// answer turns the connection into a tunnel (WebSocket), bytes both ways
// until both sides closed. With a pool key (relay_request) the upstream
// connection comes from, and goes back to, the idle connections of that
// place (actors/upstream_pool.hpp); one the far end had closed while idle is
// replaced by a fresh one before any answer byte. Runs on the HTTP server's Asio thread
// (actors/http_server.cpp); only that file includes this header.
#pragma once

#include <functional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "actors/http_server.hpp"
#include "sys/fd.hpp"

namespace dsec::relay {

/// How a relay ended, for the connection it borrowed.
enum class outcome {
  /// Nothing was written to the client: the caller answers `error` (502).
  failed,
  /// The answer is complete and the connection may read its next request.
  reusable,
  /// The connection must close (a tunnel ended, the upstream broke off, the
  /// client asked for close or went away).
  close,
};

/// Relays `req` between `client` (whose already-read bytes are in
/// `pending`) and `upstream`; `done` runs once on the Asio thread. The
/// caller keeps `client` and `pending` alive until then.
void start(boost::asio::ip::tcp::socket& client, boost::beast::flat_buffer& pending,
           bool client_keep_alive, sys::unique_fd upstream, relay_request req,
           std::function<void(outcome, std::string error)> done);

/// Closes the idle upstream connections kept for the server whose Asio
/// thread ran `ex` (actors/upstream_pool.hpp); call once that thread ended.
void close_idle(const boost::asio::any_io_executor& ex);

} // namespace dsec::relay
