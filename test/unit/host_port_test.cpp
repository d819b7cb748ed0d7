// Table tests of the node address grammar (core/host_port.hpp): every
// accepted form with its host and port, every refused form with the reason in
// the message, and port 0 accepted only where a listener may take any port.
#include <catch2/catch.hpp>

#include <string>

#include "core/host_port.hpp"

using dsec::errc;
using dsec::parse_host_port;

TEST_CASE("parse_host_port accepts host:port forms", "[host_port]") {
  struct row { const char* in; const char* host; uint16_t port; };
  const row rows[] = {
    {"127.0.0.1:7070", "127.0.0.1", 7070},
    {"localhost:7070", "localhost", 7070},
    {"[::1]:7070", "::1", 7070},
    {"[2001:db8::1]:443", "2001:db8::1", 443},
    {"node-3.cluster:1", "node-3.cluster", 1},
    {"h:65535", "h", 65535},
    {"0.0.0.0:80", "0.0.0.0", 80},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    for (bool zero : {false, true}) {
      auto hp = parse_host_port(r.in, zero);
      REQUIRE(hp);
      CHECK(hp->first == r.host);
      CHECK(hp->second == r.port);
    }
  }
}

TEST_CASE("parse_host_port rejects malformed input, naming it and why", "[host_port]") {
  struct row { const char* in; const char* why; };
  const row rows[] = {
    {"", "missing ':port'"},
    {"localhost", "missing ':port'"},
    {":7070", "empty host"},
    {"[]:80", "empty host"},
    {"h:", "port is not a number"},
    {"h:70x", "port is not a number"},
    {"h:-1", "port is not a number"},
    {"h: 80", "port is not a number"},
    {"h:0", "port out of range 1..65535"},
    {"h:65536", "port out of range 1..65535"},
    {"h:99999999999", "port is not a number"},
    {"::1:7070", "IPv6 addresses need brackets, e.g. [::1]:7070"},
    {"[::1]7070", "missing ':port' after ']'"},
    {"[::1]", "missing ':port' after ']'"},
    {"[::1", "missing ']' after IPv6 address"},
  };
  for (const auto& r : rows) {
    INFO(r.in);
    auto hp = parse_host_port(r.in);
    REQUIRE_FALSE(hp);
    CHECK(hp.err().code == errc::invalid_argument);
    CHECK(hp.err().message == std::string{"parse host:port '"} + r.in + "': " + r.why);
  }
}

TEST_CASE("parse_host_port takes port 0 only when asked", "[host_port]") {
  auto any = parse_host_port("127.0.0.1:0", true);
  REQUIRE(any);
  CHECK(any->second == 0);
  auto refused = parse_host_port("127.0.0.1:0", false);
  REQUIRE_FALSE(refused);
  CHECK(refused.err().message == "parse host:port '127.0.0.1:0': port out of range 1..65535");
  auto big = parse_host_port("h:65536", true);
  REQUIRE_FALSE(big);
  CHECK(big.err().message == "parse host:port 'h:65536': port out of range 0..65535");
}
