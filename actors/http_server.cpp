// Beast-based HTTP/1.1 server: one Asio thread, keep-alive, one request at a
// time per connection, raw-formatted answers (plain and chunked).
#include "actors/http_server.hpp"

#include <cctype>
#include <deque>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "actors/http_websocket_beast.hpp"
#include "actors/http_relay.hpp"
#include "core/json_codec.hpp"

namespace dsec {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* reason_of(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

std::string head(int status, const std::string& content_type, bool keep_alive,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) + "\r\n";
  h += "Server: dsec\r\nContent-Type: " + content_type + "\r\n";
  for (auto& [k, v] : extra)
    h += k + ": " + v + "\r\n";
  if (!keep_alive)
    h += "Connection: close\r\n";
  return h;
}


class session;

/// The exchange of one request; forwards everything to its session's thread.
class exchange final : public http_exchange {
 public:
  exchange(std::shared_ptr<session> s, bool keep_alive)
    : session_(std::move(s)), keep_alive_(keep_alive) {}

  void respond(http_answer answer) override;
  void begin_stream(int status, std::string content_type) override;
  void write_chunk(std::string data) override;
  void end_stream() override;
  void on_disconnect(std::function<void()> f) override;
  std::shared_ptr<ws_conn> upgrade_websocket(ws_handlers h) override;
  void relay(sys::unique_fd upstream, relay_request req) override;
  void abort_stream() override;

 private:
  std::shared_ptr<session> session_;
  bool keep_alive_;
};

class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket sock, size_t max_body, http_handler& handler)
    : sock_(std::move(sock)), max_body_(max_body), handler_(handler) {}

  void start() { read_next(); }

  /// Registers a disconnect callback for the exchange in flight.
  void add_disconnect_hook(std::function<void()> f) {
    net::post(sock_.get_executor(), [self = shared_from_this(), f = std::move(f)]() mutable {
      if (self->closed_)
        return f();
      self->hooks_.push_back(std::move(f));
    });
  }

  /// Lends the connection to a relay (ports): once the answers queued
  /// before it are written, the relay writes the client's answer itself.
  void relay(sys::unique_fd upstream, relay_request req, bool keep_alive) {
    auto fd = std::make_shared<sys::unique_fd>(std::move(upstream));
    net::post(sock_.get_executor(), [self = shared_from_this(), fd, req = std::move(req),
                                     keep_alive]() mutable {
      if (self->closed_)
        return;
      relay::start(self->sock_, self->buf_, keep_alive, std::move(*fd), std::move(req),
                   [self, keep_alive](relay::outcome o, std::string error) {
                     if (o == relay::outcome::failed) {
                       auto body = json_codec::encode(dsec::error{errc::unavailable, error});
                       // 502: the upstream (a port, a peer) failed, not the node.
                       return self->send(head(502, "application/json", keep_alive, {})
                                           + "Content-Length: " + std::to_string(body.size())
                                           + "\r\n\r\n" + body,
                                         true, keep_alive);
                     }
                     if (o == relay::outcome::close || self->closed_)
                       return self->close();
                     self->hooks_.clear();
                     self->read_next();
                   });
    });
  }

  /// Queues raw bytes; `last` ends the exchange (read next or close).
  void send(std::string bytes, bool last, bool keep_alive) {
    net::post(sock_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), last,
                                     keep_alive]() mutable {
      self->out_.push_back({std::move(bytes), last, keep_alive});
      if (self->out_.size() == 1)
        self->write_front();
    });
  }

  /// Hands the connection to a WebSocket (http_websocket.hpp) if the
  /// request in flight asked for one; null otherwise.
  std::shared_ptr<ws_conn> upgrade(ws_handlers h) {
    auto req = upgrade_req_;
    if (!req)
      return nullptr;
    auto ws = make_websocket(sock_.get_executor(), std::move(h));
    net::post(sock_.get_executor(), [self = shared_from_this(), ws, req] {
      if (self->closed_ || !self->out_.empty())
        return; // gone, or an answer was started instead: nothing to take over
      ++self->gen_; // the peer watch is the WebSocket's business now
      self->closed_ = true;
      self->hooks_.clear();
      beast::error_code ignored;
      self->sock_.cancel(ignored);
      start_websocket(ws, std::move(self->sock_), std::move(*req));
    });
    return ws;
  }

 private:
  struct pending {
    std::string bytes;
    bool last;
    bool keep_alive;
  };

  void read_next() {
    parser_.emplace();
    parser_->body_limit(max_body_);
    parser_->header_limit(64 * 1024);
    http::async_read(sock_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->on_read(ec);
                     });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof
        || ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return close();
    if (ec == http::error::body_limit)
      return refuse(413, too_large("request body larger than " + std::to_string(max_body_)
                                   + " bytes"));
    if (ec)
      return refuse(400, invalid_argument("malformed HTTP request: " + ec.message()));
    auto req = parser_->release();
    upgrade_req_ = is_websocket_upgrade(req)
                     ? std::make_shared<http::request<http::string_body>>(req)
                     : nullptr;
    ++gen_;
    hooks_.clear();
    watch_peer();
    auto ex = std::make_shared<exchange>(shared_from_this(), req.keep_alive());
    ex->method = std::string(req.method_string().data(), req.method_string().size());
    ex->target = std::string(req.target().data(), req.target().size());
    ex->body = std::move(req.body());
    for (auto& field : req) {
      std::string name(field.name_string().data(), field.name_string().size());
      for (auto& ch : name)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      ex->headers.emplace_back(std::move(name),
                               std::string(field.value().data(), field.value().size()));
    }
    handler_(std::move(ex));
  }

  /// Answers a request that never reached the gateway, then closes.
  void refuse(int status, const error& err) {
    auto body = json_codec::encode(err);
    send(head(status, "application/json", false, {}) + "Content-Length: "
           + std::to_string(body.size()) + "\r\n\r\n" + body,
         true, false);
  }

  void write_front() {
    net::async_write(sock_, net::buffer(out_.front().bytes),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       auto done = std::move(self->out_.front());
                       self->out_.pop_front();
                       if (ec)
                         return self->close();
                       if (done.last) {
                         self->hooks_.clear(); // answered: nothing left to cancel
                         if (!done.keep_alive)
                           return self->close();
                         self->read_next();
                       }
                       if (!self->out_.empty())
                         self->write_front();
                     });
  }

  /// While a request is served, notices the client closing its end: the
  /// socket turns readable and a peek reads EOF. Pipelined bytes end the watch.
  void watch_peer() {
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen = gen_](
                                               beast::error_code ec) {
      if (ec || gen != self->gen_ || self->closed_)
        return;
      char c;
      auto n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        self->close();
    });
  }

  void close() {
    if (!closed_) {
      closed_ = true;
      auto hooks = std::move(hooks_);
      hooks_.clear();
      for (auto& f : hooks)
        f();
    }
    beast::error_code ignored;
    sock_.shutdown(tcp::socket::shutdown_both, ignored);
    sock_.close(ignored);
  }

  tcp::socket sock_;
  size_t max_body_;
  http_handler& handler_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<pending> out_;
  /// Bumped per request, so a stale peer watch does nothing.
  uint64_t gen_ = 0;
  bool closed_ = false;
  std::vector<std::function<void()>> hooks_;
  /// The request in flight if it asked for a WebSocket (upgrade()).
  std::shared_ptr<http::request<http::string_body>> upgrade_req_;
};

void exchange::respond(http_answer a) {
  auto h = head(a.status, a.content_type, keep_alive_, a.headers);
  h += "Content-Length: " + std::to_string(a.body.size()) + "\r\n\r\n";
  h += a.body;
  session_->send(std::move(h), true, keep_alive_);
}

void exchange::begin_stream(int status, std::string content_type) {
  auto h = head(status, content_type, keep_alive_, {});
  h += "Transfer-Encoding: chunked\r\n\r\n";
  session_->send(std::move(h), false, keep_alive_);
}

void exchange::write_chunk(std::string data) {
  if (data.empty())
    return;
  char len[32];
  snprintf(len, sizeof(len), "%zx\r\n", data.size());
  session_->send(len + std::move(data) + "\r\n", false, keep_alive_);
}

void exchange::end_stream() { session_->send("0\r\n\r\n", true, keep_alive_); }

void exchange::abort_stream() { session_->send(std::string{}, true, false); }

void exchange::relay(sys::unique_fd upstream, relay_request req) {
  session_->relay(std::move(upstream), std::move(req), keep_alive_);
}

void exchange::on_disconnect(std::function<void()> f) {
  session_->add_disconnect_hook(std::move(f));
}

std::shared_ptr<ws_conn> exchange::upgrade_websocket(ws_handlers h) {
  return session_->upgrade(std::move(h));
}

class server final : public http_server {
 public:
  server(size_t max_body, http_handler handler)
    : max_body_(max_body), handler_(std::move(handler)), acceptor_(io_) {}

  ~server() override { stop(); }

  status listen(const std::string& host, uint16_t port) {
    beast::error_code ec;
    auto addr = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
    if (ec)
      return invalid_argument("rest address \"" + host + "\": " + ec.message());
    tcp::endpoint ep{addr, port};
    acceptor_.open(ep.protocol(), ec);
    if (!ec)
      acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec)
      acceptor_.bind(ep, ec);
    if (!ec)
      acceptor_.listen(1024, ec);
    if (ec)
      return unavailable("listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
    return {};
  }

  uint16_t port() const override { return port_; }

  void stop() override {
    if (!thread_.joinable())
      return;
    io_.stop();
    thread_.join();
    relay::close_idle(io_.get_executor());
  }

 private:
  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (ec)
        return;
      sock.set_option(tcp::no_delay(true), ec);
      std::make_shared<session>(std::move(sock), max_body_, handler_)->start();
      accept();
    });
  }

  size_t max_body_;
  http_handler handler_;
  net::io_context io_{1};
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
};

} // namespace

expected<std::unique_ptr<http_server>> start_http_server(const std::string& host, uint16_t port,
                                                         size_t max_body_bytes,
                                                         http_handler handler) {
  auto srv = std::make_unique<server>(max_body_bytes, std::move(handler));
  if (auto st = srv->listen(host, port); !st)
    return st.err();
  return std::unique_ptr<http_server>{std::move(srv)};
}

} // namespace dsec
