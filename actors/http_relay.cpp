// The port relay (see http_relay.hpp): connect, request out, answer head
// parsed only for its framing, body and tunnels passed through as they come.
#include "actors/http_relay.hpp"

#include <sys/socket.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include <boost/asio.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/beast/http/status.hpp>

#include "actors/port_dialer.hpp"
#include "actors/upstream_pool.hpp"
#include "core/json_codec.hpp"

namespace dsec::relay {

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

/// Largest answer head accepted from an upstream.
constexpr size_t max_head = 64 * 1024;
/// Bytes moved per read: one socket buffer's worth keeps syscalls few
/// without holding much per connection.
constexpr size_t chunk = 64 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// Finds where a chunked body ends, fed the bytes as they pass.
class chunk_scanner {
 public:
  /// Feeds `data`; returns how many of its bytes belong to the body (all of
  /// them until the end is seen), and sets done().
  size_t feed(std::string_view data) {
    size_t i = 0;
    while (i < data.size() && !done_) {
      char ch = data[i];
      switch (state_) {
        case size_line: // hex digits, maybe ";ext", then CRLF
          if (ch == '\n') {
            state_ = left_ == 0 ? trailer_start : body;
          } else if (!in_ext_ && std::isxdigit(static_cast<unsigned char>(ch))) {
            left_ = left_ * 16 + static_cast<uint64_t>(std::isdigit(ch) ? ch - '0'
                                                       : std::tolower(ch) - 'a' + 10);
          } else if (ch == ';') {
            in_ext_ = true;
          }
          ++i;
          break;
        case body: {
          auto n = std::min<uint64_t>(left_, data.size() - i);
          i += n;
          left_ -= n;
          if (left_ == 0)
            state_ = body_end;
          break;
        }
        case body_end: // CRLF after the data
          if (ch == '\n') {
            state_ = size_line;
            in_ext_ = false;
          }
          ++i;
          break;
        case trailer_start: // an empty line ends the message, else a trailer
          if (ch == '\n')
            done_ = true;
          else if (ch != '\r')
            state_ = trailer;
          ++i;
          break;
        case trailer:
          if (ch == '\n')
            state_ = trailer_start;
          ++i;
          break;
      }
    }
    return i;
  }
  bool done() const { return done_; }

 private:
  enum { size_line, body, body_end, trailer_start, trailer } state_ = size_line;
  uint64_t left_ = 0;
  bool in_ext_ = false;
  bool done_ = false;
};

/// How the upstream's answer body ends.
enum class framing { none, length, chunked, until_close, tunnel };

class relay_op : public std::enable_shared_from_this<relay_op> {
 public:
  relay_op(tcp::socket& client, boost::beast::flat_buffer& pending, bool keep_alive,
           sys::unique_fd upstream, relay_request req,
           std::function<void(outcome, std::string)> done)
    : client_(client), pending_(pending), keep_alive_(keep_alive),
      up_(client.get_executor()), req_(std::move(req)), done_(std::move(done)) {
    if (upstream)
      up_.assign(upstream.release());
  }

  void run() {
    watch_client();
    if (up_.is_open())
      return await_connect();
    // A request that may be repeated takes an idle connection to the same
    // place if there is one; any other dials a fresh one.
    if (!req_.pool_key.empty() && idempotent()) {
      int fd = upstream_pool::of(up_.get_executor()).take(req_.pool_key);
      if (fd >= 0) {
        up_.assign(fd);
        reused_ = true;
        return on_connected({});
      }
    }
    dial();
  }

 private:
  /// A nonblocking connect completes when the socket turns writable.
  void await_connect() {
    up_.async_wait(net::posix::descriptor_base::wait_write,
                   [self = shared_from_this()](error_code ec) { self->on_connected(ec); });
  }

  bool idempotent() const {
    auto sp = req_.bytes.find(' ');
    std::string_view m(req_.bytes.data(), sp == std::string::npos ? 0 : sp);
    return !req_.upgrade
           && (m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "PUT" || m == "DELETE");
  }

  /// A fresh connection from req_.dial, opened on the port dialer thread.
  void dial() {
    reused_ = false;
    if (!req_.dial)
      return fail("no connection to relay to");
    ports::post_dial([self = shared_from_this()] {
      auto fd = std::make_shared<expected<sys::unique_fd>>(self->req_.dial());
      net::post(self->up_.get_executor(), [self, fd] {
        if (self->finished_)
          return;
        if (!*fd)
          return self->refuse(fd->err());
        self->up_.assign((*fd)->release());
        self->await_connect();
      });
    });
  }

  /// The dial failed: the client gets the error itself (404 for a sandbox
  /// gone, 501 for a backend without ports, else 502), the connection kept.
  void refuse(const error& err) {
    int status = err.code == errc::not_found ? 404 : err.code == errc::invalid_argument ? 501 : 502;
    auto body = json_codec::encode(err);
    auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    auto out = std::make_shared<std::string>(
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size())
      + "\r\nServer: dsec\r\nContent-Type: application/json\r\n"
      + (keep_alive_ ? "" : "Connection: close\r\n") + "Content-Length: "
      + std::to_string(body.size()) + "\r\n\r\n" + body);
    started_ = true;
    net::async_write(client_, net::buffer(*out), [self = shared_from_this(), out](error_code ec, size_t) {
      self->finish(!ec && self->keep_alive_ ? outcome::reusable : outcome::close);
    });
  }

  void on_connected(error_code ec) {
    if (finished_)
      return;
    int err = 0;
    socklen_t len = sizeof(err);
    if (!ec && ::getsockopt(up_.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
    if (ec || err)
      return fail(err == ECONNREFUSED ? "nothing listens there (connection refused)"
                                      : std::string{"connect: "}
                                          + (ec ? ec.message() : std::strerror(err)));
    net::async_write(up_, net::buffer(req_.bytes),
                     [self = shared_from_this()](error_code ec, size_t) {
                       if (ec)
                         return self->fail(ec == net::error::connection_refused
                                             ? "nothing listens there (connection refused)"
                                             : "send the request: " + ec.message());
                       if (!self->reused_)
                         self->req_.bytes.clear(); // kept only to repeat on a fresh connection
                       self->read_head();
                     });
  }

  void read_head() {
    up_.async_read_some(net::buffer(buf_), [self = shared_from_this()](error_code ec, size_t n) {
      self->on_head_bytes(ec, n);
    });
  }

  void on_head_bytes(error_code ec, size_t n) {
    if (finished_)
      return;
    if (ec == net::error::connection_refused)
      return fail("nothing listens there (connection refused)");
    if (ec)
      return fail(head_.empty() ? "closed the connection without answering (" + ec.message() + ")"
                                : "broke off its answer's head (" + ec.message() + ")");
    head_.append(buf_.data(), n);
    auto end = head_.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (head_.size() > max_head)
        return fail("answered a head larger than 64 KiB");
      return read_head();
    }
    std::string rest = head_.substr(end + 4);
    head_.resize(end + 2); // keep the last header's CRLF
    std::string out;
    if (!rewrite_head(out))
      return fail("answered something that is not HTTP/1.x");
    started_ = true;
    if (framing_ == framing::tunnel)
      return start_tunnel(std::move(out), std::move(rest));
    send_body(std::move(out), rest);
  }

  /// The client's head from the upstream's, with this hop's framing and
  /// connection headers; sets framing_.
  bool rewrite_head(std::string& out) {
    auto eol = head_.find("\r\n");
    std::string_view status_line(head_.data(), eol);
    if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1.")
      return false;
    int status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
    up_keep_ = status_line.substr(0, 8) == "HTTP/1.1" && status >= 200;
    bool has_length = false, chunked = false;
    uint64_t length = 0;
    std::string headers;
    size_t pos = eol + 2;
    while (pos < head_.size()) {
      auto next = head_.find("\r\n", pos);
      if (next == std::string::npos)
        break;
      std::string_view line(head_.data() + pos, next - pos);
      pos = next + 2;
      auto colon = line.find(':');
      if (colon == std::string_view::npos)
        continue;
      auto name = lower(trim(line.substr(0, colon)));
      auto value = trim(line.substr(colon + 1));
      if (name == "content-length") {
        has_length = true;
        length = std::strtoull(std::string(value).c_str(), nullptr, 10);
      } else if (name == "transfer-encoding") {
        chunked = lower(value).find("chunked") != std::string::npos;
      } else if (name == "connection" && lower(value).find("close") != std::string::npos) {
        up_keep_ = false;
      }
      bool hop = name == "connection" || name == "keep-alive" || name == "proxy-connection";
      if (status == 101 || !hop)
        headers.append(line.data(), line.size()).append("\r\n");
    }
    if (status == 101 && req_.upgrade)
      framing_ = framing::tunnel;
    else if (req_.head || status == 204 || status == 304 || (status >= 100 && status < 200))
      framing_ = framing::none;
    else if (chunked)
      framing_ = framing::chunked;
    else if (has_length)
      framing_ = length == 0 ? framing::none : framing::length;
    else
      framing_ = framing::until_close; // passed on re-chunked, so the client keeps the connection
    left_ = length;
    out = "HTTP/1.1 " + std::string(status_line.substr(9)) + "\r\n" + headers;
    if (framing_ == framing::until_close)
      out += "Transfer-Encoding: chunked\r\n";
    if (framing_ != framing::tunnel && !keep_alive_)
      out += "Connection: close\r\n";
    out += "\r\n";
    return true;
  }

  /// Writes `out` plus the body bytes in `data`, then reads more until the
  /// body ends.
  void send_body(std::string out, std::string_view data) {
    bool end = append_body(out, data);
    body_done_ = end;
    if (end && framing_ == framing::until_close)
      out += "0\r\n\r\n";
    auto keep = std::make_shared<std::string>(std::move(out));
    net::async_write(client_, net::buffer(*keep),
                     [self = shared_from_this(), keep, end](error_code ec, size_t) {
                       self->body_written(ec, end);
                     });
  }

  /// Body bytes the upstream frames itself (a length, chunks) go to the
  /// client straight from the read buffer, not copied: the next read waits
  /// for the write.
  void send_body_in_place(size_t n) {
    std::string_view data(buf_.data(), n);
    size_t take;
    if (framing_ == framing::length) {
      take = static_cast<size_t>(std::min<uint64_t>(left_, n));
      left_ -= take;
      body_done_ = left_ == 0;
    } else {
      take = scanner_.feed(data);
      body_done_ = scanner_.done();
    }
    extra_ = extra_ || take < n;
    net::async_write(client_, net::buffer(buf_.data(), take),
                     [self = shared_from_this(), end = body_done_](error_code ec, size_t) {
                       self->body_written(ec, end);
                     });
  }

  void body_written(error_code ec, bool end) {
    if (ec)
      return finish(outcome::close);
    if (end)
      return finish(keep_alive_ ? outcome::reusable : outcome::close);
    up_.async_read_some(net::buffer(buf_), [self = shared_from_this()](error_code ec, size_t n) {
      self->on_body_bytes(ec, n);
    });
  }

  void on_body_bytes(error_code ec, size_t n) {
    if (finished_)
      return;
    if (ec) {
      if (ec == net::error::eof && framing_ == framing::until_close) {
        eof_ = true;
        return send_body({}, {});
      }
      return finish(outcome::close); // broke off: the client sees a short answer
    }
    if (framing_ == framing::length || framing_ == framing::chunked)
      return send_body_in_place(n);
    send_body({}, std::string_view(buf_.data(), n));
  }

  /// Appends the body bytes of `data` to `out` (as a chunk if re-chunking);
  /// true once the body is complete.
  bool append_body(std::string& out, std::string_view data) {
    switch (framing_) {
      case framing::none:
        extra_ = extra_ || !data.empty();
        return true;
      case framing::length: {
        auto n = std::min<uint64_t>(left_, data.size());
        extra_ = extra_ || n < data.size();
        out.append(data.data(), n);
        left_ -= n;
        return left_ == 0;
      }
      case framing::chunked: {
        auto n = scanner_.feed(data);
        extra_ = extra_ || n < data.size();
        out.append(data.data(), n);
        return scanner_.done();
      }
      case framing::until_close:
        if (!data.empty()) {
          char len[32];
          std::snprintf(len, sizeof(len), "%zx\r\n", data.size());
          out.append(len).append(data.data(), data.size()).append("\r\n");
        }
        return eof_;
      case framing::tunnel:
        return false;
    }
    return true;
  }

  // -- tunnels (101) ------------------------------------------------------------

  void start_tunnel(std::string out, std::string rest) {
    out += rest;
    auto keep = std::make_shared<std::string>(std::move(out));
    net::async_write(client_, net::buffer(*keep),
                     [self = shared_from_this(), keep](error_code ec, size_t) {
                       if (ec)
                         return self->finish(outcome::close);
                       self->tunnel_up();
                       self->tunnel_down();
                     });
  }

  /// Client to upstream: what the server read past the request first.
  void tunnel_up() {
    if (pending_.size() > 0) {
      auto data = std::make_shared<std::string>(
        static_cast<const char*>(pending_.data().data()), pending_.size());
      pending_.consume(pending_.size());
      net::async_write(up_, net::buffer(*data), [self = shared_from_this(), data](error_code ec, size_t) {
        if (ec)
          return self->finish(outcome::close);
        self->tunnel_up();
      });
      return;
    }
    client_.async_read_some(net::buffer(cbuf_), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->finished_)
        return;
      if (ec) { // the client is done sending: so is the upstream's peer
        ::shutdown(self->up_.native_handle(), SHUT_WR);
        return self->tunnel_half_done();
      }
      net::async_write(self->up_, net::buffer(self->cbuf_.data(), n),
                       [self](error_code ec, size_t) {
                         if (ec)
                           return self->finish(outcome::close);
                         self->tunnel_up();
                       });
    });
  }

  /// Upstream to client.
  void tunnel_down() {
    up_.async_read_some(net::buffer(buf_), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->finished_)
        return;
      if (ec) {
        error_code ignored;
        self->client_.shutdown(tcp::socket::shutdown_send, ignored);
        return self->tunnel_half_done();
      }
      net::async_write(self->client_, net::buffer(self->buf_.data(), n),
                       [self](error_code ec, size_t) {
                         if (ec)
                           return self->finish(outcome::close);
                         self->tunnel_down();
                       });
    });
  }

  void tunnel_half_done() {
    if (++halves_done_ == 2)
      finish(outcome::close);
  }

  // -- the client going away ------------------------------------------------------

  /// Until the answer starts (or, for plain requests, ends), a client that
  /// closes its end ends the relay and closes the upstream: a hung upstream
  /// holds nothing after its client gave up.
  void watch_client() {
    client_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      if (self->finished_ || self->framing_ == framing::tunnel)
        return;
      if (ec) // the server closed the connection (its own watch saw the client go)
        return self->finish(outcome::close);
      char ch;
      auto n = ::recv(self->client_.native_handle(), &ch, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        self->finish(outcome::close);
      // Bytes of a pipelined request end the watch: the server reads them next.
    });
  }

  void fail(std::string why) {
    if (started_)
      return finish(outcome::close);
    if (finished_)
      return;
    if (reused_ && head_.empty()) { // an idle connection the far end had closed: once more, fresh
      close_upstream();
      up_ = net::posix::stream_descriptor(client_.get_executor());
      return dial();
    }
    finished_ = true;
    close_upstream();
    done_(outcome::failed, req_.what + ": " + why);
  }

  void finish(outcome o) {
    if (finished_)
      return;
    finished_ = true;
    if (upstream_reusable()) {
      error_code ignored;
      up_.cancel(ignored);
      upstream_pool::of(up_.get_executor()).put(up_.get_executor(), req_.pool_key, up_.release());
    } else {
      close_upstream();
    }
    if (o != outcome::reusable) { // wake the client watch so it lets go of this op
      error_code ignored;
      client_.cancel(ignored);
    }
    done_(o, {});
  }

  /// The upstream's answer ended cleanly on a connection it keeps open.
  bool upstream_reusable() const {
    return !req_.pool_key.empty() && up_.is_open() && up_keep_ && body_done_ && !extra_
           && (framing_ == framing::none || framing_ == framing::length
               || framing_ == framing::chunked);
  }

  void close_upstream() {
    error_code ignored;
    up_.cancel(ignored);
    up_.close(ignored);
  }

  tcp::socket& client_;
  boost::beast::flat_buffer& pending_;
  bool keep_alive_;
  net::posix::stream_descriptor up_;
  relay_request req_;
  std::function<void(outcome, std::string)> done_;
  std::array<char, chunk> buf_;
  std::array<char, chunk> cbuf_;
  std::string head_;
  framing framing_ = framing::none;
  uint64_t left_ = 0;
  chunk_scanner scanner_;
  bool started_ = false; ///< bytes went to the client
  bool reused_ = false;  ///< the upstream came idle from the pool
  bool up_keep_ = false; ///< the upstream keeps its connection after this answer
  bool body_done_ = false;
  bool extra_ = false;   ///< the upstream sent bytes past its answer
  bool eof_ = false;
  bool finished_ = false;
  int halves_done_ = 0;
};

} // namespace

void start(tcp::socket& client, boost::beast::flat_buffer& pending, bool client_keep_alive,
           sys::unique_fd upstream, relay_request req,
           std::function<void(outcome, std::string)> done) {
  std::make_shared<relay_op>(client, pending, client_keep_alive, std::move(upstream),
                             std::move(req), std::move(done))
    ->run();
}

void close_idle(const boost::asio::any_io_executor& ex) { upstream_pool::close_all(ex); }

} // namespace dsec::relay
