// `dsec pty ID [--cmd CMD] [--attach PID] [--cols N --rows N] [--rest HOST:PORT]`:
// the local terminal attached to a terminal in a sandbox, over the REST
// WebSocket (actors/gateway_pty.hpp). The local tty goes to raw mode (every
// key, Ctrl-C included, goes to the sandbox) and is restored at the end;
// its size goes along at the start and on every SIGWINCH. The client side of
// RFC 6455 is small enough to write here: the handshake, masked frames out,
// frames in, close. Exit status: the terminal's command's.
#include "cmd/pty_cmd.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "core/host_port.hpp"

namespace dsec::cli {

namespace {

const char* pty_usage = "dsec pty ID [--cmd CMD | --attach PID] [--cols N --rows N] "
                        "[--rest HOST:PORT]";
const char* pty_help =
  "Attaches this terminal to a new terminal in sandbox ID (the user's login shell, or\n"
  "--cmd run by /bin/sh -c), or to terminal --attach PID opened earlier (its\n"
  "scrollback first). Raw mode: every key goes to the sandbox; the size follows this\n"
  "window unless --cols/--rows say otherwise. Ends when the command exits, with its\n"
  "exit status. The node's API key comes from $DSEC_API_KEY.\n";

volatile sig_atomic_t resized = 0;

/// One WebSocket client connection (blocking socket).
class ws_client {
 public:
  ~ws_client() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  status connect(const std::string& host, uint16_t port, const std::string& target) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
      return unavailable("resolve " + host + ": " + gai_strerror(e));
    fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd_ < 0 ? -1 : ::connect(fd_, res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (rc != 0)
      return unavailable("connect " + host + ":" + std::to_string(port) + ": "
                         + std::strerror(errno));
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port)
                      + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: ZHNlYy1wdHktY2xpZW50IQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n";
    if (auto key = ::getenv("DSEC_API_KEY"); key && *key)
      req += std::string("X-API-Key: ") + key + "\r\n";
    req += "\r\n";
    if (!send_all(req))
      return unavailable("send the upgrade request: " + std::string(std::strerror(errno)));
    while (buf_.find("\r\n\r\n") == std::string::npos)
      if (!fill())
        return unavailable("the node closed the connection during the upgrade");
    auto end = buf_.find("\r\n\r\n");
    auto head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    if (head.compare(0, 12, "HTTP/1.1 101") == 0)
      return {};
    // An HTTP error: its JSON body says why.
    auto cl = head.find("Content-Length: ");
    size_t n = cl == std::string::npos ? 0 : std::strtoul(head.c_str() + cl + 16, nullptr, 10);
    while (buf_.size() < n && fill()) {
    }
    int code = std::atoi(head.c_str() + 9);
    auto j = nlohmann::json::parse(buf_, nullptr, false);
    std::string msg = j.is_object() && j.contains("error") ? j["error"].value("message", "")
                                                           : buf_.substr(0, 200);
    return error{code == 404 ? errc::not_found : code == 409 ? errc::conflict
                 : code < 500 ? errc::invalid_argument : errc::unavailable, msg};
  }

  bool send(const std::string& data, bool binary) {
    std::string f(1, char(0x80 | (binary ? 2 : 1)));
    size_t n = data.size();
    if (n < 126) {
      f += char(0x80 | n);
    } else if (n < 65536) {
      f += char(0x80 | 126);
      f += char(n >> 8);
      f += char(n & 0xff);
    } else {
      f += char(0x80 | 127);
      for (int i = 7; i >= 0; --i)
        f += char((uint64_t(n) >> (8 * i)) & 0xff);
    }
    uint32_t m = rng_();
    char mask[4];
    std::memcpy(mask, &m, 4);
    f.append(mask, 4);
    for (size_t i = 0; i < n; ++i)
      f += char(data[i] ^ mask[i % 4]);
    return send_all(f);
  }

  /// The next whole message: 1 text, 2 binary, 0 closed.
  int recv(std::string& out) {
    out.clear();
    int first = -1;
    for (;;) {
      if (!need(2))
        return 0;
      uint8_t b0 = uint8_t(buf_[0]), b1 = uint8_t(buf_[1]);
      size_t hdr = 2, n = b1 & 0x7f;
      if (n == 126) {
        if (!need(4))
          return 0;
        n = (uint8_t(buf_[2]) << 8) | uint8_t(buf_[3]);
        hdr = 4;
      } else if (n == 127) {
        if (!need(10))
          return 0;
        n = 0;
        for (int i = 0; i < 8; ++i)
          n = (n << 8) | uint8_t(buf_[2 + i]);
        hdr = 10;
      }
      if (!need(hdr + n))
        return 0;
      std::string payload = buf_.substr(hdr, n);
      buf_.erase(0, hdr + n);
      int op = b0 & 0x0f;
      if (op == 8)
        return 0;
      if (op == 9) { // ping
        send_control(10, payload);
        continue;
      }
      if (op == 10)
        continue;
      if (op != 0)
        first = op;
      out += payload;
      if (b0 & 0x80)
        return first;
    }
  }

  int fd() const { return fd_; }
  bool buffered() const { return !buf_.empty(); }

 private:
  bool send_all(const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      auto n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      off += size_t(n);
    }
    return true;
  }
  void send_control(int op, const std::string& payload) {
    std::string f(1, char(0x80 | op));
    f += char(0x80 | payload.size());
    f.append(4, '\0'); // a zero mask
    f += payload;
    send_all(f);
  }
  bool fill() {
    char b[65536];
    for (;;) {
      auto n = ::recv(fd_, b, sizeof(b), 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      buf_.append(b, size_t(n));
      return true;
    }
  }
  bool need(size_t n) {
    while (buf_.size() < n)
      if (!fill())
        return false;
    return true;
  }

  int fd_ = -1;
  std::string buf_;
  std::mt19937 rng_{std::random_device{}()};
};

/// The local terminal in raw mode for the life of this object.
struct raw_tty {
  termios saved{};
  bool on = false;
  raw_tty() {
    if (::isatty(0) && ::tcgetattr(0, &saved) == 0) {
      termios raw = saved;
      ::cfmakeraw(&raw);
      on = ::tcsetattr(0, TCSANOW, &raw) == 0;
    }
  }
  ~raw_tty() {
    if (on)
      ::tcsetattr(0, TCSANOW, &saved);
  }
};

std::string size_message(int cols, int rows) {
  return nlohmann::json{{"type", "resize"}, {"cols", cols}, {"rows", rows}}.dump();
}

bool window_size(int& cols, int& rows) {
  winsize ws{};
  if (::ioctl(1, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0)
    return false;
  cols = ws.ws_col;
  rows = ws.ws_row;
  return true;
}

int cmd_pty(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"cmd", "attach", "cols", "rows", "rest"}, {"help"});
  if (!a)
    return fail("pty", a.err());
  if (a->has("help")) {
    std::cout << "usage: " << pty_usage << "\n" << pty_help;
    return 0;
  }
  if (a->positional.size() != 1) {
    std::cerr << "usage: " << pty_usage << "\n";
    return 2;
  }
  if (a->has("cmd") && a->has("attach"))
    return fail("pty", invalid_argument("--cmd and --attach exclude each other"));
  int cols = 80, rows = 24;
  bool follow_window = window_size(cols, rows);
  for (auto [flag, v] : {std::pair{"cols", &cols}, {"rows", &rows}})
    if (a->has(flag)) {
      auto n = to_int(std::string("--") + flag, a->get(flag));
      if (!n)
        return fail("pty", n.err());
      *v = int(*n);
      follow_window = false;
    }
  auto id = url_encode(a->positional[0]);
  std::string target;
  if (a->has("attach")) {
    auto pid = to_int("--attach", a->get("attach"));
    if (!pid)
      return fail("pty", pid.err());
    target = "/v1/sandboxes/" + id + "/pty/" + std::to_string(*pid);
  } else {
    target = "/v1/sandboxes/" + id + "/pty?cols=" + std::to_string(cols) + "&rows="
             + std::to_string(rows);
    if (a->has("cmd"))
      target += "&cmd=" + url_encode(a->get("cmd"));
  }
  auto addr = a->get("rest", ::getenv("DSEC_REST") ? ::getenv("DSEC_REST") : "127.0.0.1:7070");
  auto hp = parse_host_port(addr);
  if (!hp)
    return fail("pty", hp.err());
  ws_client ws;
  if (auto st = ws.connect(hp->first, hp->second, target); !st)
    return fail("pty", st.err());
  struct sigaction sa{};
  sa.sa_handler = [](int) { resized = 1; };
  ::sigaction(SIGWINCH, &sa, nullptr);
  raw_tty tty;
  if (a->has("attach") || follow_window)
    ws.send(size_message(cols, rows), false);
  int exit_code = 0;
  std::string msg;
  bool stdin_open = true; // a pipe's EOF ends the input, not the session
  for (;;) {
    if (resized && follow_window) {
      resized = 0;
      if (window_size(cols, rows))
        ws.send(size_message(cols, rows), false);
    }
    pollfd p[2] = {{stdin_open ? 0 : -1, POLLIN, 0}, {ws.fd(), POLLIN, 0}};
    int n = ws.buffered() ? 1 : ::poll(p, 2, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (p[0].revents & (POLLIN | POLLHUP)) {
      char b[4096];
      auto k = ::read(0, b, sizeof(b));
      if (k > 0)
        ws.send(std::string(b, size_t(k)), true);
      else if (k == 0 || errno != EINTR)
        stdin_open = false;
    }
    if (ws.buffered() || (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      int kind = ws.recv(msg);
      if (kind == 0)
        break;
      if (kind == 2) {
        (void)!::write(1, msg.data(), msg.size());
        continue;
      }
      auto j = nlohmann::json::parse(msg, nullptr, false);
      auto type = j.is_object() ? j.value("type", "") : "";
      if (type == "exit")
        exit_code = j.value("exit_code", 0);
      else if (type == "error")
        std::cerr << "\r\ndsec pty: " << j.value("message", msg) << "\r\n";
    }
  }
  return exit_code;
}

} // namespace

bool is_pty_command(const std::string& cmd) { return cmd == "pty"; }

int run_pty_command(const std::string&, const std::vector<std::string>& args) {
  return cmd_pty(args);
}

} // namespace dsec::cli
