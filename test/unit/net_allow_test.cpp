// The network allow-list grammar (backends/net/net_allow.hpp): which entries
// parse into which address, prefix, domain and port, and what each refused
// entry is told. Pure; the kernel side is in test/security/net_policy_test.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "backends/net/net_allow.hpp"

using namespace dsec;

TEST_CASE("net allow: entries that parse", "[net][allow]") {
  struct row {
    const char* entry;
    const char* addr;   ///< format_addr of the result; "" for a domain
    int prefix;         ///< over the v4-mapped 128 bits
    const char* domain; ///< "" for an address
    uint16_t port;      ///< 0 = any
  };
  std::vector<row> rows = {
    // host:port
    {"10.1.2.3:443", "10.1.2.3", 128, "", 443},
    {"10.1.2.3:1", "10.1.2.3", 128, "", 1},
    {"10.1.2.3:65535", "10.1.2.3", 128, "", 65535},
    {"10.1.2.3:*", "10.1.2.3", 128, "", 0},
    {"[2001:db8::1]:443", "2001:db8::1", 128, "", 443},
    // cidr:port (an IPv4 prefix counts from bit 96 of the mapped address)
    {"10.0.0.0/8:*", "10.0.0.0", 104, "", 0},
    {"192.168.1.0/24:8080", "192.168.1.0", 120, "", 8080},
    {"10.1.2.3/32:22", "10.1.2.3", 128, "", 22},
    {"0.0.0.0/0:53", "0.0.0.0", 96, "", 53},
    {"[2001:db8::/32]:53", "2001:db8::", 32, "", 53},
    {"[::/0]:443", "::", 0, "", 443},
    // domain:port (lower-cased)
    {"PyPI.org:443", "", 128, "pypi.org", 443},
    {"files.pythonhosted.org:*", "", 128, "files.pythonhosted.org", 0},
    {"a-b.example.com:80", "", 128, "a-b.example.com", 80},
    {"localhost:8000", "", 128, "localhost", 8000},
    {"x1.io:1", "", 128, "x1.io", 1},
  };
  for (auto& r : rows) {
    INFO(r.entry);
    auto e = net::parse_allow_entry(r.entry);
    REQUIRE(e);
    CHECK(e->port == r.port);
    CHECK(e->domain == r.domain);
    if (e->domain.empty()) {
      CHECK(net::format_addr(e->addr) == r.addr);
      CHECK(e->prefix == r.prefix);
    }
  }
}

TEST_CASE("net allow: bad entries name themselves and the fault", "[net][allow]") {
  struct row {
    std::string entry;
    const char* why; ///< a part of the message after the entry
  };
  std::vector<row> rows = {
    {"", "empty"},
    {"10.1.2.3", "missing \":port\""},
    {"pypi.org", "missing \":port\""},
    {"10.1.2.3:", "port must be 1..65535 or *"},
    {"10.1.2.3:0", "port must be 1..65535 or *"},
    {"10.1.2.3:65536", "port must be 1..65535 or *"},
    {"10.1.2.3:+80", "port must be 1..65535 or *"},
    {"10.1.2.3:http", "port must be 1..65535 or *"},
    {"10.1.2.3:1234567", "port must be 1..65535 or *"},
    {":80", "missing host"},
    {"10.0.0.1/8:80", "prefix has host bits set"},
    {"[2001:db8::1/32]:80", "prefix has host bits set"},
    {"10.0.0.0/33:1", "IPv4 prefix length must be 0..32"},
    {"10.0.0.0/x:1", "prefix length must be a number"},
    {"10.0.0.0/:1", "prefix length must be a number"},
    {"[2001:db8::/129]:1", "prefix length must be a number"},
    {"2001:db8::1:443", "IPv6 addresses go in brackets"},
    {"2001:db8::1", "IPv6 addresses go in brackets"},
    {"[2001:db8::1]443", "an IPv6 entry is [address]:port"},
    {"[2001:db8::1]", "an IPv6 entry is [address]:port"},
    {"[2001:db8::1", "an IPv6 entry is [address]:port"},
    {"[1.2.3.4]:80", "brackets are for IPv6 addresses only"},
    {"-bad.com:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"bad-.com:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"a..b:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {".a.b:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"x_y.com:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"1.2.3:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"256.1.1.1:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {"example.com/24:80", "not an IPv4/IPv6 address, prefix or domain name"},
    {std::string(64, 'a') + ".com:80", "not an IPv4/IPv6 address, prefix or domain name"},
  };
  for (auto& r : rows) {
    INFO(r.entry);
    auto e = net::parse_allow_entry(r.entry);
    REQUIRE_FALSE(e);
    CHECK(e.err().code == errc::invalid_argument);
    auto& msg = e.err().message;
    CHECK(msg.rfind("network.allow entry \"" + r.entry + "\": ", 0) == 0);
    CHECK(msg.find(r.why) != std::string::npos);
  }
  // A label of 63 characters is the longest allowed.
  CHECK(net::parse_allow_entry(std::string(63, 'a') + ".com:80"));
}

TEST_CASE("net allow: whole lists", "[net][allow]") {
  auto none = net::parse_allow_list({});
  REQUIRE(none);
  CHECK(none->empty());

  auto two = net::parse_allow_list({"10.0.0.0/8:*", "pypi.org:443"});
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK(two->at(1).domain == "pypi.org");

  std::vector<std::string> full(net::max_allow_entries, "1.2.3.4:1");
  CHECK(net::parse_allow_list(full));
  full.push_back("1.2.3.4:1");
  auto over = net::parse_allow_list(full);
  REQUIRE_FALSE(over);
  CHECK(over.err().message == "network.allow: at most 128 entries, got 129");

  // The first bad entry's own error, unchanged.
  auto bad = net::parse_allow_list({"1.2.3.4:1", "1.2.3.4:0", "nope"});
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("\"1.2.3.4:0\"") != std::string::npos);
}

TEST_CASE("net allow: v4-mapped addresses", "[net][allow]") {
  struct row {
    const char* v4;
  };
  for (auto r : std::vector<row>{{"0.0.0.0"}, {"10.0.0.1"}, {"255.255.255.255"}}) {
    INFO(r.v4);
    in_addr a{};
    REQUIRE(inet_pton(AF_INET, r.v4, &a) == 1);
    auto m = net::v4_mapped(a.s_addr);
    CHECK(m[10] == 0xff);
    CHECK(m[11] == 0xff);
    CHECK(net::format_addr(m) == r.v4);
  }
  net::addr16 v6{};
  v6[15] = 1;
  CHECK(net::format_addr(v6) == "::1");
}
