// The HTTP/1.1 client: the incremental response parser
// (head, Content-Length, chunked and close-delimited bodies) and the blocking
// socket loop. Every wait is a poll(2) bounded by the request's deadline; every
// socket is non-blocking and close-on-exec (the bench forks from many threads).
#include "sys/http_client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>

namespace dsec::sys {

namespace {

// A response head larger than this is not from a dsec gateway; refusing it
// bounds memory. Too small fails large-cookie servers, which we never talk to.
constexpr size_t max_head_bytes = 1 << 20;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// True if the comma-separated header value contains `token` (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
  auto v = lower(value);
  std::string_view rest = v;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    if (trim(rest.substr(0, comma)) == token)
      return true;
    if (comma == std::string_view::npos)
      break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

// Finds the end of the head: returns the head length (without the blank line)
// and sets `consumed` to the bytes up to and including the blank line.
size_t find_head_end(std::string_view buf, size_t& consumed) {
  size_t pos = 0;
  while (true) {
    auto nl = buf.find('\n', pos);
    if (nl == std::string_view::npos)
      return std::string_view::npos;
    auto line = buf.substr(pos, nl - pos);
    if (line.empty() || line == "\r") {
      consumed = nl + 1;
      return pos;
    }
    pos = nl + 1;
  }
}

error malformed(std::string what) {
  return invalid_argument("parse http response: " + std::move(what));
}

} // namespace

// -- response parser ----------------------------------------------------------

status http_response_parser::feed(std::string_view data) {
  if (!data.empty())
    started_ = true;
  buf_.append(data);
  bool progressed = true;
  while (progressed && phase_ != phase::done) {
    progressed = false;
    if (auto st = step(progressed); !st)
      return st;
  }
  return {};
}

status http_response_parser::finish_eof() {
  if (phase_ == phase::body_until_close)
    phase_ = phase::done;
  if (phase_ == phase::done) {
    keep_alive_ = false;
    return {};
  }
  return unavailable(started_ ? "read http response: connection closed mid-response"
                              : "read http response: connection closed before any byte");
}

status http_response_parser::step(bool& progressed) {
  switch (phase_) {
    case phase::head:
      return step_head(progressed);
    case phase::body_length:
    case phase::chunk_data: {
      auto n = std::min(remaining_, buf_.size());
      if (n == 0 && remaining_ > 0)
        return {};
      resp_.body.append(buf_, 0, n);
      buf_.erase(0, n);
      remaining_ -= n;
      if (remaining_ == 0)
        phase_ = phase_ == phase::body_length ? phase::done : phase::chunk_crlf;
      progressed = true;
      return {};
    }
    case phase::chunk_crlf: {
      size_t n = buf_.rfind("\r\n", 0) == 0 ? 2 : buf_.rfind('\n', 0) == 0 ? 1 : 0;
      if (n == 0)
        return buf_.empty() || buf_ == "\r" ? status{} : status{malformed("missing CRLF after chunk")};
      buf_.erase(0, n);
      phase_ = phase::chunk_size;
      progressed = true;
      return {};
    }
    case phase::chunk_size:
      return step_chunk_size(progressed);
    case phase::trailers:
      return step_trailers(progressed);
    case phase::body_until_close:
      resp_.body += buf_;
      buf_.clear();
      return {};
    case phase::done:
      return {};
  }
  return {};
}

status http_response_parser::step_head(bool& progressed) {
  size_t consumed = 0;
  auto len = find_head_end(buf_, consumed);
  if (len == std::string_view::npos)
    return buf_.size() > max_head_bytes ? status{too_large("parse http response: head exceeds 1 MiB")}
                                        : status{};
  auto head = buf_.substr(0, len);
  buf_.erase(0, consumed);
  resp_ = http_response{};
  if (auto st = parse_head(head); !st)
    return st;
  progressed = true;
  // Interim 1xx responses (100 Continue) precede the real one; 101 ends HTTP.
  if (resp_.status >= 100 && resp_.status < 200 && resp_.status != 101)
    return {};
  start_body();
  return {};
}

status http_response_parser::parse_head(std::string_view head) {
  auto nl = head.find('\n');
  auto line = trim(head.substr(0, nl));
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ')
    return malformed("bad status line '" + std::string(line.substr(0, 80)) + "'");
  bool http10 = line[7] == '0';
  int code = 0;
  auto [end, ec] = std::from_chars(line.data() + 9, line.data() + 12, code);
  if (ec != std::errc{} || end != line.data() + 12 || code < 100 || code > 999)
    return malformed("bad status code in '" + std::string(line.substr(0, 80)) + "'");
  resp_.status = code;
  std::string last;
  while (nl != std::string_view::npos) {
    auto next = head.find('\n', nl + 1);
    auto raw = head.substr(nl + 1, next == std::string_view::npos ? next : next - nl - 1);
    nl = next;
    if (trim(raw).empty())
      continue;
    if ((raw.front() == ' ' || raw.front() == '\t') && !last.empty()) {
      resp_.headers[last] += ' ';
      resp_.headers[last] += trim(raw);
      continue;
    }
    auto colon = raw.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return malformed("header line without name: '" + std::string(trim(raw).substr(0, 80)) + "'");
    last = lower(trim(raw.substr(0, colon)));
    auto value = std::string(trim(raw.substr(colon + 1)));
    auto [it, fresh] = resp_.headers.emplace(last, value);
    if (!fresh)
      it->second += ", " + value;
  }
  auto conn = resp_.headers.find("connection");
  keep_alive_ = conn == resp_.headers.end() ? !http10
              : has_token(conn->second, "close") ? false
              : http10 ? has_token(conn->second, "keep-alive") : true;
  return {};
}

void http_response_parser::start_body() {
  auto code = resp_.status;
  if (head_ || code == 204 || code == 304 || code < 200) {
    phase_ = phase::done;
    return;
  }
  auto te = resp_.headers.find("transfer-encoding");
  if (te != resp_.headers.end() && has_token(te->second, "chunked")) {
    phase_ = phase::chunk_size;
    return;
  }
  auto cl = resp_.headers.find("content-length");
  if (cl == resp_.headers.end()) {
    phase_ = phase::body_until_close;
    keep_alive_ = false;
    return;
  }
  const auto& v = cl->second;
  size_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc{} || end != v.data() + v.size()) {
    // A bad length makes the rest of the stream unreadable: take what comes.
    phase_ = phase::body_until_close;
    keep_alive_ = false;
    return;
  }
  remaining_ = n;
  phase_ = n == 0 ? phase::done : phase::body_length;
}

status http_response_parser::step_chunk_size(bool& progressed) {
  auto nl = buf_.find('\n');
  if (nl == std::string::npos)
    return buf_.size() > 1024 ? status{malformed("chunk size line too long")} : status{};
  auto line = trim(std::string_view(buf_).substr(0, nl));
  line = line.substr(0, line.find(';')); // drop chunk extensions
  line = trim(line);
  size_t size = 0;
  auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
  if (line.empty() || ec != std::errc{} || end != line.data() + line.size())
    return malformed("bad chunk size '" + std::string(line.substr(0, 40)) + "'");
  buf_.erase(0, nl + 1);
  remaining_ = size;
  phase_ = size == 0 ? phase::trailers : phase::chunk_data;
  progressed = true;
  return {};
}

status http_response_parser::step_trailers(bool& progressed) {
  auto nl = buf_.find('\n');
  if (nl == std::string::npos)
    return {};
  auto line = std::string_view(buf_).substr(0, nl);
  bool last = line.empty() || line == "\r";
  buf_.erase(0, nl + 1);
  if (last)
    phase_ = phase::done;
  progressed = true;
  return {};
}

// -- client -------------------------------------------------------------------

http_client::http_client(std::string host, uint16_t port)
  : host_(std::move(host)), port_(port) {
  endpoint_ = host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_;
  endpoint_ += ':' + std::to_string(port_);
}

status http_client::wait_fd(short events, clock::time_point deadline, std::string_view op) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0)
      return error{errc::timeout, std::string(op) + ' ' + endpoint_ + ": timed out after " +
                                      std::to_string(timeout_.count()) + " ms"};
    pollfd p{fd_.get(), events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (n > 0)
      return {};
    if (n < 0 && errno != EINTR)
      return sys_error("poll", endpoint_, errno);
  }
}

status http_client::connect(clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  auto port = std::to_string(port_);
  if (int rc = ::getaddrinfo(host_.c_str(), port.c_str(), &hints, &list); rc != 0)
    return unavailable("resolve " + endpoint_ + ": " + ::gai_strerror(rc));
  int last_err = ECONNREFUSED;
  status result = sys_error("connect", endpoint_, last_err, errc::unavailable);
  for (auto* ai = list; ai; ai = ai->ai_next) {
    fd_.reset(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd_)
      continue;
    int err = 0;
    if (::connect(fd_.get(), ai->ai_addr, ai->ai_addrlen) < 0) {
      err = errno;
      if (err == EINPROGRESS) {
        result = wait_fd(POLLOUT, deadline, "connect");
        if (!result)
          break;
        socklen_t len = sizeof err;
        ::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      int one = 1;
      ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      result = {};
      break;
    }
    result = sys_error("connect", endpoint_, err, errc::unavailable);
  }
  ::freeaddrinfo(list);
  if (!result)
    fd_.reset();
  return result;
}

status http_client::send_all(std::string_view data, clock::time_point deadline) {
  while (!data.empty()) {
    auto n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EINTR) {
      if (auto st = wait_fd(POLLOUT, deadline, "send to"); !st)
        return st;
    } else {
      return sys_error("send to", endpoint_, errno, errc::unavailable);
    }
  }
  return {};
}

expected<http_response> http_client::exchange(const std::string& wire, bool head,
                                              clock::time_point deadline, bool& retryable) {
  retryable = false;
  if (auto st = send_all(wire, deadline); !st) {
    retryable = st.err().code == errc::unavailable;
    return st.err();
  }
  http_response_parser parser(head);
  char buf[64 * 1024];
  while (!parser.done()) {
    auto n = ::recv(fd_.get(), buf, sizeof buf, 0);
    status st;
    if (n > 0) {
      st = parser.feed({buf, static_cast<size_t>(n)});
    } else if (n == 0) {
      st = parser.finish_eof();
      retryable = parser.empty();
    } else if (errno == EAGAIN || errno == EINTR) {
      st = wait_fd(POLLIN, deadline, "receive from");
    } else {
      retryable = parser.empty();
      st = sys_error("receive from", endpoint_, errno, errc::unavailable);
    }
    if (!st)
      return st.err();
  }
  if (!parser.keep_alive() || !parser.leftover().empty())
    fd_.reset();
  return std::move(parser.response());
}

expected<http_response> http_client::request(std::string_view method, std::string_view target,
                                             std::string_view body,
                                             std::string_view content_type,
                                             std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  auto deadline = clock::now() + timeout;
  std::string wire;
  wire.reserve(128 + target.size() + body.size());
  wire.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ");
  wire.append(endpoint_).append("\r\n").append(extra_headers_);
  if (!body.empty())
    wire.append("Content-Type: ").append(content_type).append("\r\n");
  if (!body.empty() || (method != "GET" && method != "HEAD"))
    wire.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  wire.append("\r\n").append(body);
  auto with_context = [&](const error& e) {
    return error{e.code, "http " + std::string(method) + ' ' + std::string(target) + ": " + e.message};
  };
  bool head = method == "HEAD";
  // A reused keep-alive connection may have been closed by the server while
  // idle; that shows as EOF/reset before the first response byte: retry once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = fd_.valid();
    if (!reused)
      if (auto st = connect(deadline); !st)
        return with_context(st.err());
    bool retryable = false;
    auto resp = exchange(wire, head, deadline, retryable);
    if (resp)
      return resp;
    fd_.reset();
    if (!(reused && retryable))
      return with_context(resp.err());
  }
  return with_context(unavailable("connection to " + endpoint_ + " lost twice"));
}

} // namespace dsec::sys
