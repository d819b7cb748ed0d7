// The Beast side of http_websocket.hpp, for http_server.cpp alone: starts a
// WebSocket on a connection whose upgrade request was read.
#pragma once

#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include "actors/http_websocket.hpp"

namespace dsec {

/// A WebSocket handle whose sends wait until start_websocket() ran and
/// the handshake ended; usable from any thread at once.
std::shared_ptr<ws_conn> make_websocket(const boost::asio::any_io_executor& ex, ws_handlers h);

/// On the executor's thread: takes `sock` over and answers the upgrade
/// `req`. A failed handshake closes the socket and calls on_close.
void start_websocket(const std::shared_ptr<ws_conn>& ws, boost::asio::ip::tcp::socket sock,
                     boost::beast::http::request<boost::beast::http::string_body> req);

/// True if `req` asks for a WebSocket upgrade.
bool is_websocket_upgrade(const boost::beast::http::request<boost::beast::http::string_body>& req);

} // namespace dsec
