// The DNS packet parser (core/dns_packet.hpp): real answers with A, AAAA,
// CNAME chains and EDNS0 parse to what they say; queries are checked as the
// resolver checks them; a corpus of malformed packets (truncations, pointer
// loops, oversized names, bad counts, bad labels) is refused with a reason;
// and a fuzz run of seeded mutations never crashes or accepts nonsense
// silently. Also addresses_for, which turns an answer into rule addresses.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "backends/net/dns_resolver.hpp"
#include "core/dns_packet.hpp"

using namespace dsec;
using bytes = std::vector<uint8_t>;

namespace {

void put16(bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}

void put_name(bytes& b, const std::string& n) { REQUIRE(dns::encode_name(n, b)); }

void put_rr(bytes& b, const std::string& name, uint16_t type, uint32_t ttl, const bytes& rdata) {
  put_name(b, name);
  put16(b, type);
  put16(b, 1);
  put16(b, ttl >> 16);
  put16(b, ttl & 0xffff);
  put16(b, static_cast<uint16_t>(rdata.size()));
  b.insert(b.end(), rdata.begin(), rdata.end());
}

// www.pkg.test CNAME cdn.pkg.test; cdn.pkg.test A 10.0.0.7 and AAAA 2001:db8::7.
bytes cname_answer() {
  bytes b = {0x12, 0x34, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 1};
  put_name(b, "www.pkg.test");
  put16(b, dns::type_a);
  put16(b, 1);
  bytes target;
  put_name(target, "cdn.pkg.test");
  put_rr(b, "www.pkg.test", dns::type_cname, 300, target);
  put_rr(b, "cdn.pkg.test", dns::type_a, 60, {10, 0, 0, 7});
  bytes v6(16, 0);
  v6[0] = 0x20, v6[1] = 0x01, v6[2] = 0x0d, v6[3] = 0xb8, v6[15] = 7;
  put_rr(b, "cdn.pkg.test", dns::type_aaaa, 120, v6);
  // OPT: root, type 41, class = udp size 1232.
  b.insert(b.end(), {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0});
  return b;
}

} // namespace

TEST_CASE("an answer with a CNAME chain, A, AAAA and EDNS0 parses", "[dns]") {
  auto b = cname_answer();
  auto m = dns::parse(b.data(), b.size());
  REQUIRE(m);
  CHECK(m->id == 0x1234);
  CHECK(m->is_response());
  CHECK(m->has_opt);
  CHECK(m->udp_size == 1232);
  REQUIRE(m->questions.size() == 1);
  CHECK(m->questions[0].name == "www.pkg.test");
  REQUIRE(m->answers.size() == 3);
  CHECK(m->answers[0].target == "cdn.pkg.test");
  std::vector<std::string> chain;
  auto addrs = net::addresses_for(*m, "www.pkg.test", &chain);
  REQUIRE(addrs.size() == 2);
  CHECK(net::format_addr(addrs[0].addr) == "10.0.0.7");
  CHECK(addrs[0].ttl == 60);
  CHECK(net::format_addr(addrs[1].addr) == "2001:db8::7");
  CHECK(addrs[1].ttl == 120);
  CHECK(chain == std::vector<std::string>{"cdn.pkg.test", "www.pkg.test"});
  // Another name's addresses are not this name's.
  CHECK(net::addresses_for(*m, "other.test").empty());
}

TEST_CASE("compressed names are followed backwards", "[dns]") {
  bytes b = {0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0};
  put_name(b, "a.pkg.test"); // at 12
  put16(b, 1);
  put16(b, 1);
  b.insert(b.end(), {0xc0, 12}); // pointer to the question's name
  b.insert(b.end(), {0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 1, 2, 3, 4});
  auto m = dns::parse(b.data(), b.size());
  REQUIRE(m);
  REQUIRE(m->answers.size() == 1);
  CHECK(m->answers[0].name == "a.pkg.test");
}

TEST_CASE("queries: built ones pass the resolver's check, others are named", "[dns]") {
  auto q = dns::build_query(7, "pypi.mirror.test", dns::type_aaaa);
  auto m = dns::parse(q.data(), q.size());
  REQUIRE(m);
  CHECK(dns::check_query(*m));
  CHECK(m->has_opt);
  CHECK(m->questions[0].type == dns::type_aaaa);
  auto r = dns::refused(*m);
  auto rm = dns::parse(r.data(), r.size());
  REQUIRE(rm);
  CHECK(rm->id == 7);
  CHECK(rm->is_response());
  CHECK(rm->rcode() == dns::rcode_refused);
  CHECK(rm->questions[0].name == "pypi.mirror.test");

  auto ans = cname_answer();
  auto am = dns::parse(ans.data(), ans.size());
  REQUIRE(am);
  auto st = dns::check_query(*am);
  REQUIRE_FALSE(st);
  CHECK_THAT(st.err().message, Catch::Contains("not a query"));
}

TEST_CASE("a corpus of malformed packets is refused with a reason", "[dns]") {
  struct row {
    bytes b;
    const char* why;
  };
  bytes loop = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}; // points at itself
  bytes forward = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 14, 0, 0, 1, 0, 1};
  bytes two_loop = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0xc0, 12, 0, 1, 0, 1};
  bytes long_label = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 64};
  long_label.insert(long_label.end(), 64, 'a');
  long_label.insert(long_label.end(), {0, 0, 1, 0, 1});
  bytes long_name = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 5; ++i) {
    long_name.push_back(60);
    long_name.insert(long_name.end(), 60, 'b');
  }
  long_name.insert(long_name.end(), {0, 0, 1, 0, 1});
  bytes bad_byte = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'a', '.', 'b', 0, 0, 1, 0, 1};
  bytes counts = {0, 1, 1, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};
  bytes trailing = dns::build_query(1, "a.test", 1);
  trailing.push_back(0);
  bytes cut = dns::build_query(1, "a.test", 1);
  cut.resize(cut.size() - 3);
  bytes reserved = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x80, 0, 1, 0, 1};
  std::vector<row> rows = {
    {{}, "shorter than the 12-byte header"},
    {{0, 1, 2}, "shorter than the 12-byte header"},
    {loop, "pointer does not point backwards"},
    {forward, "pointer does not point backwards"},
    {two_loop, "pointer does not point backwards"},
    {long_label, "reserved label type"},
    {long_name, "name longer than 255 bytes"},
    {bad_byte, "label byte outside"},
    {counts, "section counts larger than the packet"},
    {trailing, "bytes after the last record"},
    {cut, "runs past the end"},
    {reserved, "reserved label type"},
  };
  for (auto& r : rows) {
    CAPTURE(r.why);
    auto m = dns::parse(r.b.data(), r.b.size());
    REQUIRE_FALSE(m);
    CHECK_THAT(m.err().message, Catch::Contains(r.why));
  }
  bytes big(dns::max_packet + 1, 0);
  CHECK_FALSE(dns::parse(big.data(), big.size()));
}

TEST_CASE("fuzz: seeded mutations of good packets never crash the parser", "[dns]") {
  std::vector<bytes> seeds = {cname_answer(), dns::build_query(9, "x.pkg.test", 28)};
  std::mt19937 rng(29);
  size_t parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b = seeds[i % seeds.size()];
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
      case 0: b[rng() % b.size()] = uint8_t(rng()); break;             // flip a byte
      case 1: b.resize(rng() % (b.size() + 1)); break;                  // cut
      case 2: b.insert(b.begin() + long(rng() % (b.size() + 1)), uint8_t(rng())); break;
      case 3: if (b.size() > 13) b[12 + rng() % (b.size() - 12)] = 0xc0; break; // pointers
      }
      if (b.empty())
        b.push_back(0);
    }
    auto m = dns::parse(b.data(), b.size());
    if (!m) {
      ++refused;
      continue;
    }
    ++parsed;
    // Whatever parses is internally sane.
    for (auto& q : m->questions)
      CHECK(q.name.size() <= 255);
    for (auto& r : m->answers) {
      CHECK(r.name.size() <= 255);
      CHECK(r.target.size() <= 255);
    }
  }
  CHECK(refused > 0);
  CHECK(parsed + refused == 20000);
}

// -- the SNI / Host check's parsers (core/sni.hpp) ---------------------------------

#include "core/sni.hpp"

namespace {

// A minimal TLS 1.2 ClientHello with an SNI extension for `name`.
bytes client_hello(const std::string& name) {
  bytes ext_sni;
  bytes list;
  list.push_back(0);
  put16(list, uint16_t(name.size()));
  list.insert(list.end(), name.begin(), name.end());
  put16(ext_sni, 0); // server_name
  put16(ext_sni, uint16_t(list.size() + 2));
  put16(ext_sni, uint16_t(list.size()));
  ext_sni.insert(ext_sni.end(), list.begin(), list.end());
  bytes body = {3, 3};
  body.insert(body.end(), 32, 0x11); // random
  body.push_back(0);                 // session id
  put16(body, 2);
  put16(body, 0x1301); // one suite
  body.push_back(1);
  body.push_back(0); // null compression
  put16(body, uint16_t(ext_sni.size()));
  body.insert(body.end(), ext_sni.begin(), ext_sni.end());
  bytes hs = {1, 0, uint8_t(body.size() >> 8), uint8_t(body.size() & 0xff)};
  hs.insert(hs.end(), body.begin(), body.end());
  bytes rec = {22, 3, 1};
  put16(rec, uint16_t(hs.size()));
  rec.insert(rec.end(), hs.begin(), hs.end());
  return rec;
}

} // namespace

TEST_CASE("the SNI of a ClientHello, piece by piece and malformed", "[sni]") {
  using r = net::first_bytes_name::result;
  auto h = client_hello("PyPI.Mirror.test");
  auto got = net::tls_server_name(h.data(), h.size());
  CHECK(got.r == r::found);
  CHECK(got.name == "pypi.mirror.test");
  for (size_t n = 0; n < h.size(); ++n)
    CHECK(net::tls_server_name(h.data(), n).r == r::need_more);
  // Not TLS: known from the first byte, no need to wait for more.
  bytes http = {'G', 'E', 'T', ' '};
  CHECK(net::tls_server_name(http.data(), http.size()).r == r::malformed);
  auto bad = client_hello("evil example"); // a space is no host name
  CHECK(net::tls_server_name(bad.data(), bad.size()).r == r::malformed);
  std::mt19937 rng(443);
  for (int i = 0; i < 5000; ++i) {
    auto m = h;
    m[5 + rng() % (m.size() - 5)] = uint8_t(rng());
    (void)net::tls_server_name(m.data(), m.size()); // never reads past the end
  }
}

TEST_CASE("the Host of an HTTP request", "[sni]") {
  using r = net::first_bytes_name::result;
  struct row {
    const char* req;
    r want;
    const char* name;
  };
  const row rows[] = {
    {"GET / HTTP/1.1\r\nHost: Pypi.Mirror.Test:80\r\nAccept: */*\r\n\r\n", r::found,
     "pypi.mirror.test"},
    {"GET / HTTP/1.0\r\nhost:npm.test\r\n\r\n", r::found, "npm.test"},
    {"GET / HTTP/1.0\r\n\r\n", r::none, ""},
    {"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", r::malformed, ""},
    {"GET / HTTP/1.1\r\nHost: a.test\r\n", r::need_more, ""},
    {"\x16\x03\x01 hello\r\n\r\n", r::malformed, ""},
  };
  for (auto& x : rows) {
    CAPTURE(x.req);
    std::string s = x.req;
    auto got = net::http_host(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    CHECK(got.r == x.want);
    CHECK(got.name == x.name);
  }
}
