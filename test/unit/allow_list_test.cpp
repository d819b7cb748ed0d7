// Table tests of the allow-list grammar (core/allow_list.hpp) and of the
// gateway's check that uses it (validate(network_policy)): every accepted
// form with what it parses to, every refused form with the reason the parser
// gives and the exact message the gateway answers, and the promise between
// them: whatever validate() accepts, the backend's parse_allow_list accepts.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "core/allow_list.hpp"
#include "core/validate.hpp"

using namespace dsec;

namespace {

struct accepted {
  const char* in;
  const char* addr; // format_addr of the address; "" for a domain entry
  int prefix;
  const char* domain;
  uint16_t port;
};

const accepted accepted_rows[] = {
  {"10.1.2.3:443", "10.1.2.3", 128, "", 443},
  {"1.2.3.4:1", "1.2.3.4", 128, "", 1},
  {"1.2.3.4:65535", "1.2.3.4", 128, "", 65535},
  {"10.0.0.0/8:*", "10.0.0.0", 104, "", 0},
  {"0.0.0.0/0:*", "0.0.0.0", 96, "", 0},
  {"192.168.1.7/32:80", "192.168.1.7", 128, "", 80},
  {"[2001:db8::1]:443", "2001:db8::1", 128, "", 443},
  {"[2001:db8::/32]:53", "2001:db8::", 32, "", 53},
  {"[::/0]:*", "::", 0, "", 0},
  {"[::1]:8080", "::1", 128, "", 8080},
  {"pypi.org:443", "", 128, "pypi.org", 443},
  {"PyPI.org:443", "", 128, "pypi.org", 443},
  {"localhost:80", "", 128, "localhost", 80},
  {"a-b.example-1.com:*", "", 128, "a-b.example-1.com", 0},
  {"1.2.3.4.example:22", "", 128, "1.2.3.4.example", 22},
};

struct refused {
  const char* in;
  const char* why; // the part after `network.allow entry "<in>": `
};

const refused refused_rows[] = {
  {"", "empty"},
  {"[2001:db8::1]", "an IPv6 entry is [address]:port or [prefix/len]:port"},
  {"[2001:db8::1]443", "an IPv6 entry is [address]:port or [prefix/len]:port"},
  {"[2001:db8::1", "an IPv6 entry is [address]:port or [prefix/len]:port"},
  {"pypi.org", "missing \":port\" (a number or *)"},
  {"1.2.3.4", "missing \":port\" (a number or *)"},
  {"2001:db8::1:443", "IPv6 addresses go in brackets: [2001:db8::1]:443"},
  {"1.2.3.4:0", "port must be 1..65535 or *"},
  {"1.2.3.4:65536", "port must be 1..65535 or *"},
  {"1.2.3.4:", "port must be 1..65535 or *"},
  {"1.2.3.4:http", "port must be 1..65535 or *"},
  {"1.2.3.4:-1", "port must be 1..65535 or *"},
  {"1.2.3.4:1234567", "port must be 1..65535 or *"},
  {"[2001:db8::1]:0", "port must be 1..65535 or *"},
  {":80", "missing host"},
  {"[]:80", "missing host"},
  {"10.0.0.0/x:80", "prefix length must be a number"},
  {"10.0.0.0/:80", "prefix length must be a number"},
  {"10.0.0.0/129:80", "prefix length must be a number"},
  {"[1.2.3.4]:80", "brackets are for IPv6 addresses only"},
  {"10.0.0.0/33:80", "IPv4 prefix length must be 0..32"},
  {"bad_name!:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"*.example.com:443", "not an IPv4/IPv6 address, prefix or domain name"},
  {"-a.example:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"a-.example:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"a..b:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {".a:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"1.2.3:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"256.1.1.1:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"pypi.org/8:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"[zz::1]:80", "not an IPv4/IPv6 address, prefix or domain name"},
  {"10.0.0.1/8:80", "prefix has host bits set"},
  {"[2001:db8::1/32]:80", "prefix has host bits set"},
};

std::string gateway_message(const std::string& entry) {
  return "network.allow: \"" + entry
         + "\" is not host:port, cidr:port, [v6]:port or domain:port (port 1-65535 or *)";
}

network_policy policy_of(std::vector<std::string> allow) {
  network_policy p;
  p.allow = std::move(allow);
  return p;
}

} // namespace

TEST_CASE("allow-list entries: every accepted form", "[allow_list]") {
  for (const auto& r : accepted_rows) {
    INFO(r.in);
    auto e = net::parse_allow_entry(r.in);
    REQUIRE(e);
    CHECK(e->domain == r.domain);
    CHECK(e->port == r.port);
    if (e->domain.empty()) {
      CHECK(net::format_addr(e->addr) == r.addr);
      CHECK(e->prefix == r.prefix);
    }
  }
}

TEST_CASE("allow-list entries: every refused form names entry and reason", "[allow_list]") {
  for (const auto& r : refused_rows) {
    INFO(r.in);
    auto e = net::parse_allow_entry(r.in);
    REQUIRE_FALSE(e);
    CHECK(e.err().code == errc::invalid_argument);
    CHECK(e.err().message == std::string{"network.allow entry \""} + r.in + "\": " + r.why);
  }
}

TEST_CASE("allow lists: at most 128 entries", "[allow_list]") {
  std::vector<std::string> list(net::max_allow_entries, "10.0.0.1:80");
  auto ok = net::parse_allow_list(list);
  REQUIRE(ok);
  CHECK(ok->size() == net::max_allow_entries);
  list.push_back("10.0.0.2:80");
  auto many = net::parse_allow_list(list);
  REQUIRE_FALSE(many);
  CHECK(many.err().message == "network.allow: at most 128 entries, got 129");
  auto bad = net::parse_allow_list({"10.0.0.1:80", "pypi.org"});
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message == "network.allow entry \"pypi.org\": missing \":port\" (a number or *)");
  CHECK(net::parse_allow_list({})->empty());
}

TEST_CASE("v4_mapped and format_addr are inverse", "[allow_list]") {
  CHECK(net::format_addr(net::v4_mapped(htonl(0x0a010203))) == "10.1.2.3");
  net::addr16 v6{};
  v6[15] = 1;
  CHECK(net::format_addr(v6) == "::1");
}

TEST_CASE("the gateway accepts exactly what the backend parses", "[allow_list]") {
  for (const auto& r : accepted_rows) {
    INFO(r.in);
    CHECK(validate(policy_of({r.in})));
  }
  for (const auto& r : refused_rows) {
    INFO(r.in);
    auto st = validate(policy_of({"10.0.0.1:80", r.in}));
    REQUIRE_FALSE(st);
    CHECK(st.err().code == errc::invalid_argument);
    CHECK(st.err().message == gateway_message(r.in));
  }
  // Long entries are cut to 200 bytes in the gateway's message.
  std::string long_entry(300, 'a');
  CHECK(validate(policy_of({long_entry})).err().message
        == gateway_message(long_entry.substr(0, 200)));
}

TEST_CASE("the gateway bounds list length as the backend does", "[allow_list]") {
  std::vector<std::string> list(128, "10.0.0.1:80");
  CHECK(validate(policy_of(list)));
  list.push_back("10.0.0.1:80");
  auto st = validate(policy_of(list));
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::invalid_argument);
  CHECK(st.err().message == "network.allow: at most 128 entries, got 129");
  list.resize(257, "10.0.0.1:80");
  st = validate(policy_of(list));
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::too_large);
  CHECK(st.err().message == "network.allow: more than 256 entries");
}
