// WebSocket connections of the gateway's HTTP server (http_websocket.hpp):
// one Beast websocket stream per connection, one read in flight, writes
// queued and written one at a time, everything on the socket's executor
// (the server's single Asio thread).
#include "actors/http_websocket_beast.hpp"

#include <deque>
#include <optional>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

namespace dsec {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

class ws_session final : public ws_conn, public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(net::any_io_executor ex, ws_handlers h) : ex_(std::move(ex)), h_(std::move(h)) {}

  /// On the executor's thread: takes the socket and answers the upgrade.
  void start(tcp::socket sock, http::request<http::string_body> req) {
    ws_.emplace(std::move(sock));
    ws_->read_message_max(max_ws_message);
    ws_->set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
      res.set(http::field::server, "dsec");
    }));
    req_ = std::move(req);
    ws_->async_accept(req_, [self = shared_from_this()](beast::error_code ec) {
      if (ec)
        return self->gone();
      self->open_ = true;
      self->read_next();
      if (!self->out_.empty())
        self->write_front();
      else if (self->closing_)
        self->close_now();
    });
  }

  void send(std::string data, bool binary) override {
    net::post(ex_, [self = shared_from_this(), data = std::move(data), binary]() mutable {
      if (self->gone_ || self->closing_)
        return;
      self->out_.emplace_back(std::move(data), binary);
      if (self->open_ && self->out_.size() == 1)
        self->write_front();
    });
  }

  void close() override {
    net::post(ex_, [self = shared_from_this()] {
      if (self->gone_ || self->closing_)
        return;
      self->closing_ = true;
      if (self->open_ && self->out_.empty())
        self->close_now();
    });
  }

 private:
  void read_next() {
    ws_->async_read(buf_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec)
        return self->gone();
      auto data = beast::buffers_to_string(self->buf_.data());
      self->buf_.consume(self->buf_.size());
      if (self->h_.on_message)
        self->h_.on_message(std::move(data), self->ws_->got_binary());
      self->read_next();
    });
  }

  void write_front() {
    ws_->binary(out_.front().second);
    ws_->async_write(net::buffer(out_.front().first),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      self->out_.pop_front();
                      if (ec)
                        return self->gone();
                      if (!self->out_.empty())
                        self->write_front();
                      else if (self->closing_)
                        self->close_now();
                    });
  }

  void close_now() {
    ws_->async_close(websocket::close_code::normal,
                    [self = shared_from_this()](beast::error_code) { self->gone(); });
  }

  void gone() {
    if (gone_)
      return;
    gone_ = true;
    out_.clear();
    beast::error_code ignored;
    if (ws_)
      beast::get_lowest_layer(*ws_).close(ignored);
    if (h_.on_close)
      h_.on_close();
  }

  net::any_io_executor ex_;
  std::optional<websocket::stream<tcp::socket>> ws_; // set by start()
  ws_handlers h_;
  http::request<http::string_body> req_;
  beast::flat_buffer buf_;
  std::deque<std::pair<std::string, bool>> out_;
  bool open_ = false, closing_ = false, gone_ = false;
};

} // namespace

std::shared_ptr<ws_conn> make_websocket(const net::any_io_executor& ex, ws_handlers h) {
  return std::make_shared<ws_session>(ex, std::move(h));
}

void start_websocket(const std::shared_ptr<ws_conn>& ws, tcp::socket sock,
                     http::request<http::string_body> req) {
  std::static_pointer_cast<ws_session>(ws)->start(std::move(sock), std::move(req));
}

bool is_websocket_upgrade(const http::request<http::string_body>& req) {
  return websocket::is_upgrade(req);
}

} // namespace dsec
