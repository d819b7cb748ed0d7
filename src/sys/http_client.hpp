// A small blocking HTTP/1.1 client over plain POSIX sockets, for the CLI
// commands, the bench and end-to-end tests that talk to a node's REST gateway.
// It owns one keep-alive connection, reconnects once when the server closed an
// idle connection, reads Content-Length, chunked and close-delimited bodies,
// and bounds every request by one deadline (poll). No Boost on purpose: it
// must compile in a second. The response parser is exposed (and pure) so the
// unit tests can feed it bytes in arbitrary pieces. Not thread-safe: use one
// client per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.hpp"
#include "sys/fd.hpp"

namespace dsec::sys {

/// One HTTP response.
struct http_response {
  /// Status code, e.g. 200.
  int status = 0;
  /// The decoded body (chunked framing removed).
  std::string body;
  /// Header fields with lower-case names; repeated fields joined with ", ".
  std::map<std::string, std::string> headers;
};

/// Incremental parser of one HTTP/1.1 response; feed it bytes as they arrive.
class http_response_parser {
 public:
  // -- constructors -----------------------------------------------------------

  /// `head_request`: the response to a HEAD carries no body.
  explicit http_response_parser(bool head_request = false) : head_(head_request) {}

  // -- input ------------------------------------------------------------------

  /// Consumes `data`. Bytes past the end of the response are kept in
  /// leftover(). Fails with invalid_argument on a malformed response.
  status feed(std::string_view data);

  /// Tells the parser the peer closed the connection. Completes a body that is
  /// delimited by close; fails with unavailable if the response is cut short.
  status finish_eof();

  // -- observers --------------------------------------------------------------

  /// True once a complete final (non-1xx) response was parsed.
  [[nodiscard]] bool done() const { return phase_ == phase::done; }

  /// True if no byte of the response has arrived yet.
  [[nodiscard]] bool empty() const { return !started_; }

  /// True if the connection may carry another request after this response.
  [[nodiscard]] bool keep_alive() const { return keep_alive_; }

  /// The parsed response; valid once done().
  http_response& response() { return resp_; }

  /// Bytes received after the end of the response.
  [[nodiscard]] const std::string& leftover() const { return buf_; }

 private:
  enum class phase { head, body_length, chunk_size, chunk_data, chunk_crlf,
                     trailers, body_until_close, done };

  status parse_head(std::string_view head);
  status step(bool& progressed);
  status step_head(bool& progressed);
  status step_chunk_size(bool& progressed);
  status step_trailers(bool& progressed);
  void start_body();

  bool head_ = false;
  bool started_ = false;
  bool keep_alive_ = true;
  phase phase_ = phase::head;
  size_t remaining_ = 0;
  std::string buf_;
  http_response resp_;
};

/// A blocking HTTP/1.1 client bound to one host:port, reusing one connection.
class http_client {
 public:
  // -- constructors -----------------------------------------------------------

  /// Does not connect yet; the first request does.
  http_client(std::string host, uint16_t port);

  http_client(http_client&&) noexcept = default;
  http_client& operator=(http_client&&) noexcept = default;

  // -- requests ---------------------------------------------------------------

  /// Sends one request and waits for the whole response. `content_type` is sent
  /// only with a non-empty body. If a reused connection turns out closed before
  /// any response byte, reconnects once and resends. Errors: unavailable
  /// (connect refused or connection lost, naming host:port), timeout (no
  /// complete response within `timeout`), invalid_argument (malformed response).
  expected<http_response> request(std::string_view method, std::string_view target,
                                  std::string_view body = {},
                                  std::string_view content_type = "application/json",
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /// Adds `name: value` to every request (an API key).
  void add_header(std::string_view name, std::string_view value) {
    extra_headers_.append(name).append(": ").append(value).append("\r\n");
  }

  /// Closes the connection; the next request opens a new one.
  void close() { fd_.reset(); }

  /// "host:port" as given, IPv6 hosts in brackets; used in error messages.
  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }

 private:
  /// Lines add_header() appends to every request.
  std::string extra_headers_;
  using clock = std::chrono::steady_clock;

  status connect(clock::time_point deadline);
  status send_all(std::string_view data, clock::time_point deadline);
  expected<http_response> exchange(const std::string& wire, bool head,
                                   clock::time_point deadline, bool& retryable);
  status wait_fd(short events, clock::time_point deadline, std::string_view op);

  std::string host_;
  uint16_t port_;
  std::string endpoint_;
  unique_fd fd_;
  std::chrono::milliseconds timeout_{0};
};

} // namespace dsec::sys
