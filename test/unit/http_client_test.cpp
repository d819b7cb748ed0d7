// Unit tests of the pure piece of the HTTP client, the incremental response
// parser (fed whole and byte by byte), plus one test of the client against a
// closed port (connection refused → unavailable). host:port parsing moved to
// core and is tested in host_port_test.cpp.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sys/http_client.hpp"

using dsec::errc;
using dsec::sys::http_response_parser;

namespace {

// Feeds `wire` whole or one byte at a time; returns the parser.
http_response_parser parse(const std::string& wire, bool bytewise, bool head = false) {
  http_response_parser p(head);
  if (bytewise) {
    for (char c : wire)
      REQUIRE(p.feed(std::string_view(&c, 1)));
  } else {
    REQUIRE(p.feed(wire));
  }
  return p;
}

} // namespace

TEST_CASE("response parser handles framing variants", "[http_client]") {
  struct row { const char* name; std::string wire; int status; std::string body; bool keep; };
  const row rows[] = {
    {"content-length", "HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello", 201, "hello", true},
    {"empty body", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true},
    {"zero length", "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 200, "", true},
    {"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                "4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\n\r\n",
     200, "Wikipedia in \r\n\r\nchunks.", true},
    {"chunked trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", 200, "abc", true},
    {"connection close", "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
     404, "{}", false},
    {"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 200, "x", false},
    {"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx",
     200, "x", true},
    {"100 continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
     200, "ok", true},
    {"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 200, "ok", true},
  };
  for (bool bytewise : {false, true}) {
    for (const auto& r : rows) {
      INFO(r.name << (bytewise ? " (bytewise)" : ""));
      auto p = parse(r.wire, bytewise);
      REQUIRE(p.done());
      CHECK(p.response().status == r.status);
      CHECK(p.response().body == r.body);
      CHECK(p.keep_alive() == r.keep);
      CHECK(p.leftover().empty());
    }
  }
}

TEST_CASE("response parser lower-cases and joins headers", "[http_client]") {
  auto p = parse("HTTP/1.1 429 Too Many\r\nRetry-After:  3 \r\nX-A: 1\r\nx-a: 2\r\n"
                 "Content-Length: 0\r\n\r\n", false);
  REQUIRE(p.done());
  auto& h = p.response().headers;
  CHECK(h.at("retry-after") == "3");
  CHECK(h.at("x-a") == "1, 2");
  CHECK(h.count("Retry-After") == 0);
}

TEST_CASE("response parser keeps bytes of the next response", "[http_client]") {
  auto p = parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1", false);
  REQUIRE(p.done());
  CHECK(p.response().body == "x");
  CHECK(p.leftover() == "HTTP/1.1");
}

TEST_CASE("response parser: close-delimited body and HEAD", "[http_client]") {
  auto p = parse("HTTP/1.1 200 OK\r\n\r\nabc", false);
  CHECK_FALSE(p.done());
  REQUIRE(p.feed("def"));
  REQUIRE(p.finish_eof());
  CHECK(p.done());
  CHECK(p.response().body == "abcdef");
  CHECK_FALSE(p.keep_alive());

  auto h = parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false, true);
  CHECK(h.done());
  CHECK(h.response().body.empty());
}

TEST_CASE("response parser reports truncation and garbage", "[http_client]") {
  http_response_parser cut;
  REQUIRE(cut.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"));
  auto st = cut.finish_eof();
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::unavailable);

  http_response_parser none;
  CHECK(none.empty());
  CHECK_FALSE(none.finish_eof());

  const char* bad[] = {"SMTP 220 hi\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                       "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
                       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"};
  for (const auto* wire : bad) {
    INFO(wire);
    http_response_parser p;
    auto r = p.feed(wire);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::invalid_argument);
  }
}

TEST_CASE("client reports a refused connection as unavailable naming host:port",
          "[http_client]") {
  // Bind a port and close it without listening: connecting to it is refused.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto port = ntohs(a.sin_port);
  ::close(s);
  dsec::sys::http_client c("127.0.0.1", port);
  auto r = c.request("GET", "/healthz");
  REQUIRE_FALSE(r);
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}
