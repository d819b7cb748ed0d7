// TLS SNI and HTTP Host extraction (see sni.hpp).
#include "core/sni.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace dsec::net {

namespace {

using result = first_bytes_name::result;

first_bytes_name make(result r, std::string name = {}) {
  for (auto& c : name)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!name.empty() && name.back() == '.')
    name.pop_back();
  return {r, std::move(name)};
}

bool host_chars(std::string_view s) {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

} // namespace

first_bytes_name tls_server_name(const uint8_t* d, size_t len) {
  // Record header: type 22 (handshake), version 3.x, length.
  if ((len >= 1 && d[0] != 22) || (len >= 2 && d[1] != 3))
    return make(result::malformed);
  if (len < 5)
    return make(result::need_more);
  size_t rec = size_t(d[3]) << 8 | d[4];
  if (rec < 4 || rec > 16384)
    return make(result::malformed);
  if (len < 5 + rec)
    return make(result::need_more);
  const uint8_t* p = d + 5;
  const uint8_t* end = p + rec;
  // Handshake header: type 1 (ClientHello), 3-byte length within the record.
  if (p[0] != 1)
    return make(result::malformed);
  size_t hs = size_t(p[1]) << 16 | size_t(p[2]) << 8 | p[3];
  p += 4;
  if (hs > size_t(end - p))
    return make(result::malformed); // a hello split over records: refused
  end = p + hs;
  auto need = [&](size_t n) { return size_t(end - p) >= n; };
  if (!need(2 + 32 + 1))
    return make(result::malformed);
  p += 2 + 32; // version, random
  size_t sid = p[0];
  p += 1;
  if (!need(sid + 2))
    return make(result::malformed);
  p += sid;
  size_t suites = size_t(p[0]) << 8 | p[1];
  p += 2;
  if (!need(suites + 1))
    return make(result::malformed);
  p += suites;
  size_t comp = p[0];
  p += 1;
  if (!need(comp))
    return make(result::malformed);
  p += comp;
  if (p == end)
    return make(result::none); // no extensions
  if (!need(2))
    return make(result::malformed);
  size_t ext_len = size_t(p[0]) << 8 | p[1];
  p += 2;
  if (!need(ext_len))
    return make(result::malformed);
  end = p + ext_len;
  while (need(4)) {
    uint16_t type = uint16_t(p[0] << 8 | p[1]);
    size_t l = size_t(p[2]) << 8 | p[3];
    p += 4;
    if (!need(l))
      return make(result::malformed);
    if (type == 0) { // server_name: list length, then (type 0, length, name)
      const uint8_t* q = p;
      const uint8_t* qe = p + l;
      if (qe - q < 2)
        return make(result::malformed);
      q += 2;
      while (qe - q >= 3) {
        uint8_t nt = q[0];
        size_t nl = size_t(q[1]) << 8 | q[2];
        q += 3;
        if (size_t(qe - q) < nl)
          return make(result::malformed);
        std::string_view name(reinterpret_cast<const char*>(q), nl);
        if (nt == 0)
          return host_chars(name) ? make(result::found, std::string{name})
                                  : make(result::malformed);
        q += nl;
      }
      return make(result::none);
    }
    p += l;
  }
  return make(result::none);
}

first_bytes_name http_host(const uint8_t* d, size_t len) {
  std::string_view s(reinterpret_cast<const char*>(d), std::min<size_t>(len, 16384));
  auto end = s.find("\r\n\r\n");
  if (end == std::string_view::npos)
    return make(len >= 16384 ? result::malformed : result::need_more);
  auto line_end = s.find("\r\n");
  auto first = s.substr(0, line_end);
  auto sp = first.find(' ');
  if (sp == std::string_view::npos || first.find(" HTTP/1.") == std::string_view::npos)
    return make(result::malformed);
  std::string found;
  int hosts = 0;
  size_t pos = line_end + 2;
  while (pos < end) {
    auto e = s.find("\r\n", pos);
    auto line = s.substr(pos, e - pos);
    pos = e + 2;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return make(result::malformed);
    std::string key(line.substr(0, colon));
    for (auto& c : key)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (key != "host")
      continue;
    auto v = line.substr(colon + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
      v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
      v.remove_suffix(1);
    // host[:port]; IPv6 literals are not names
    auto c = v.rfind(':');
    if (c != std::string_view::npos && v.find(']') == std::string_view::npos)
      v = v.substr(0, c);
    found = std::string{v};
    ++hosts;
  }
  if (hosts == 0)
    return make(result::none);
  // Two Host headers are how smuggling starts: refused.
  if (hosts > 1 || !host_chars(found))
    return make(result::malformed);
  return make(result::found, found);
}

} // namespace dsec::net
