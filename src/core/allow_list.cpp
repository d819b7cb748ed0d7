// Parsing of allow-list entries (grammar in allow_list.hpp): addresses and
// prefixes through inet_pton, domain names by RFC 1123, ports by hand.
#include "core/allow_list.hpp"
#include "core/egress_sources.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <cstring>

namespace dsec::net {

namespace {

error bad(std::string_view entry, const std::string& why) {
  return invalid_argument("network.allow entry \"" + std::string{entry} + "\": " + why);
}

bool parse_number(std::string_view s, long max, long& out) {
  if (s.empty() || s.size() > 6)
    return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    out = out * 10 + (c - '0');
  }
  return out <= max;
}

// RFC 1123 host names: labels of letters, digits and inner hyphens.
bool valid_domain(std::string_view d) {
  if (d.empty() || d.size() > 253)
    return false;
  size_t start = 0;
  while (start <= d.size()) {
    size_t dot = d.find('.', start);
    auto label = d.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-')
        return false;
    if (dot == std::string_view::npos)
      break;
    start = dot + 1;
  }
  // All digits and dots would be a malformed IPv4 address, not a name.
  return d.find_first_not_of("0123456789.") != std::string_view::npos;
}

bool host_bits_clear(const addr16& a, int prefix) {
  for (int bit = prefix; bit < 128; ++bit)
    if (a[bit / 8] & (0x80 >> (bit % 8)))
      return false;
  return true;
}

} // namespace

addr16 v4_mapped(uint32_t be_addr) {
  addr16 a{};
  a[10] = a[11] = 0xff;
  std::memcpy(&a[12], &be_addr, 4);
  return a;
}

std::string format_addr(const addr16& a) {
  char buf[INET6_ADDRSTRLEN];
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.data(), mapped, 12) == 0)
    return inet_ntop(AF_INET, &a[12], buf, sizeof(buf)) ? buf : "?";
  return inet_ntop(AF_INET6, a.data(), buf, sizeof(buf)) ? buf : "?";
}

expected<allow_entry> parse_allow_entry(std::string_view s) {
  if (s.empty())
    return bad(s, "empty");
  std::string_view host, port;
  if (s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return bad(s, "an IPv6 entry is [address]:port or [prefix/len]:port");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos)
      return bad(s, "missing \":port\" (a number or *)");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return bad(s, "IPv6 addresses go in brackets: [2001:db8::1]:443");
  }
  allow_entry e;
  long n = 0;
  if (port == "*")
    e.port = 0;
  else if (parse_number(port, 65535, n) && n > 0)
    e.port = static_cast<uint16_t>(n);
  else
    return bad(s, "port must be 1..65535 or *");
  if (host.empty())
    return bad(s, "missing host");
  std::string addr{host};
  int prefix = -1;
  if (auto slash = host.find('/'); slash != std::string_view::npos) {
    addr = std::string{host.substr(0, slash)};
    if (!parse_number(host.substr(slash + 1), 128, n))
      return bad(s, "prefix length must be a number");
    prefix = static_cast<int>(n);
  }
  in_addr v4{};
  if (inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    if (s.front() == '[')
      return bad(s, "brackets are for IPv6 addresses only");
    if (prefix > 32)
      return bad(s, "IPv4 prefix length must be 0..32");
    e.addr = v4_mapped(v4.s_addr);
    e.prefix = prefix < 0 ? 128 : 96 + prefix;
  } else if (inet_pton(AF_INET6, addr.c_str(), e.addr.data()) == 1) {
    if (s.front() != '[')
      return bad(s, "IPv6 addresses go in brackets: [2001:db8::1]:443");
    e.prefix = prefix < 0 ? 128 : prefix;
  } else {
    if (prefix >= 0 || !valid_domain(host))
      return bad(s, "not an IPv4/IPv6 address, prefix or domain name");
    e.domain = std::string{host};
    for (auto& c : e.domain)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return e;
  }
  if (!host_bits_clear(e.addr, e.prefix))
    return bad(s, "prefix has host bits set");
  return e;
}

expected<std::vector<allow_entry>> parse_allow_list(const std::vector<std::string>& allow) {
  // One loop over the list: the sourced parse (core/egress_sources.cpp),
  // without the source names.
  auto sourced = parse_allow_list_sourced(allow);
  if (!sourced)
    return sourced.err();
  std::vector<allow_entry> out;
  out.reserve(sourced->size());
  for (auto& s : *sourced)
    out.push_back(std::move(s.entry));
  return out;
}

} // namespace dsec::net
