// DNS packet parsing and building (see dns_packet.hpp).
#include "core/dns_packet.hpp"

#include <cstring>

namespace dsec::dns {

namespace {

constexpr size_t header_size = 12;
constexpr int max_pointers = 64;

error bad(const std::string& why, size_t at) {
  return invalid_argument("dns: " + why + " at byte " + std::to_string(at));
}

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t u32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

bool label_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'
         || c == '_';
}

// Reads a possibly compressed name at `pos`; `pos` ends after the name as
// written at its place (a pointer ends it).
status read_name(const uint8_t* d, size_t len, size_t& pos, std::string& out) {
  out.clear();
  size_t p = pos;
  size_t wire_len = 1; // the root label
  bool jumped = false;
  int pointers = 0;
  size_t name_start = pos; // pointers must point before the current name
  for (;;) {
    if (p >= len)
      return bad("name runs past the end", p);
    uint8_t l = d[p];
    if ((l & 0xc0) == 0xc0) {
      if (p + 1 >= len)
        return bad("pointer runs past the end", p);
      size_t target = (size_t(l & 0x3f) << 8) | d[p + 1];
      if (target >= name_start)
        return bad("pointer does not point backwards", p);
      if (++pointers > max_pointers)
        return bad("too many pointers", p);
      if (!jumped)
        pos = p + 2;
      jumped = true;
      p = name_start = target;
      continue;
    }
    if (l & 0xc0)
      return bad("reserved label type", p);
    if (l == 0) {
      if (!jumped)
        pos = p + 1;
      return {};
    }
    if (p + 1 + l > len)
      return bad("label runs past the end", p);
    wire_len += 1 + l;
    if (wire_len > 255)
      return bad("name longer than 255 bytes", p);
    if (!out.empty())
      out += '.';
    for (size_t i = 0; i < l; ++i) {
      uint8_t c = d[p + 1 + i];
      if (!label_char(c))
        return bad("label byte outside [A-Za-z0-9_-]", p + 1 + i);
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    p += 1 + l;
  }
}

} // namespace

expected<message> parse(const uint8_t* d, size_t len) {
  if (len > max_packet)
    return bad("packet larger than 65535 bytes", 0);
  if (len < header_size)
    return bad("shorter than the 12-byte header", 0);
  message m;
  m.id = u16(d);
  m.flags = u16(d + 2);
  uint16_t qd = u16(d + 4), an = u16(d + 6);
  m.authority = u16(d + 8);
  m.additional = u16(d + 10);
  // Every question takes at least 5 bytes and every record 11: counts that
  // cannot fit are refused before any loop runs.
  if (size_t(qd) * 5 + (size_t(an) + m.authority + m.additional) * 11 > len - header_size)
    return bad("section counts larger than the packet", 4);
  size_t pos = header_size;
  for (int i = 0; i < qd; ++i) {
    question q;
    if (auto st = read_name(d, len, pos, q.name); !st)
      return st.err();
    if (pos + 4 > len)
      return bad("question runs past the end", pos);
    q.type = u16(d + pos);
    q.cls = u16(d + pos + 2);
    pos += 4;
    m.questions.push_back(std::move(q));
  }
  size_t records = size_t(an) + m.authority + m.additional;
  for (size_t i = 0; i < records; ++i) {
    record r;
    if (auto st = read_name(d, len, pos, r.name); !st)
      return st.err();
    if (pos + 10 > len)
      return bad("record header runs past the end", pos);
    r.type = u16(d + pos);
    r.cls = u16(d + pos + 2);
    r.ttl = u32(d + pos + 4);
    uint16_t rdlen = u16(d + pos + 8);
    pos += 10;
    if (pos + rdlen > len)
      return bad("record data runs past the end", pos);
    size_t rd = pos;
    pos += rdlen;
    if (i >= an) {
      if (r.type == type_opt) {
        if (m.has_opt || i < size_t(an) + m.authority || !r.name.empty())
          return bad("misplaced or second OPT record", rd);
        m.has_opt = true;
        m.udp_size = r.cls < 512 ? 512 : r.cls;
      }
      continue;
    }
    if (r.type == type_a && r.cls == class_in) {
      if (rdlen != 4)
        return bad("A record data is not 4 bytes", rd);
      r.addr[10] = r.addr[11] = 0xff;
      std::memcpy(r.addr.data() + 12, d + rd, 4);
    } else if (r.type == type_aaaa && r.cls == class_in) {
      if (rdlen != 16)
        return bad("AAAA record data is not 16 bytes", rd);
      std::memcpy(r.addr.data(), d + rd, 16);
    } else if (r.type == type_cname) {
      size_t t = rd;
      if (auto st = read_name(d, rd + rdlen, t, r.target); !st)
        return st.err();
      if (t != rd + rdlen)
        return bad("CNAME data longer than its name", rd);
    }
    m.answers.push_back(std::move(r));
  }
  if (pos != len)
    return bad("bytes after the last record", pos);
  return m;
}

status check_query(const message& m) {
  if (m.is_response())
    return invalid_argument("dns: not a query (QR set)");
  if (m.opcode() != 0)
    return invalid_argument("dns: opcode " + std::to_string(m.opcode()) + " is not QUERY");
  if (m.questions.size() != 1)
    return invalid_argument("dns: " + std::to_string(m.questions.size())
                            + " questions, a query has one");
  if (m.questions[0].cls != class_in)
    return invalid_argument("dns: question class is not IN");
  if (!m.answers.empty() || m.authority)
    return invalid_argument("dns: a query with answer or authority records");
  if (m.additional > 1 || (m.additional == 1 && !m.has_opt))
    return invalid_argument("dns: a query's only additional record may be EDNS0's OPT");
  return {};
}

bool encode_name(const std::string& name, std::vector<uint8_t>& out) {
  size_t start = 0, total = 1;
  while (start < name.size()) {
    auto dot = name.find('.', start);
    if (dot == std::string::npos)
      dot = name.size();
    size_t l = dot - start;
    if (l == 0 || l > 63 || (total += l + 1) > 255)
      return false;
    out.push_back(static_cast<uint8_t>(l));
    out.insert(out.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  out.push_back(0);
  return true;
}

std::vector<uint8_t> refused(const message& q) {
  std::vector<uint8_t> out(header_size, 0);
  out[0] = q.id >> 8;
  out[1] = q.id & 0xff;
  // QR, opcode echoed, RD echoed, RA set, RCODE REFUSED.
  uint16_t flags = 0x8000 | (q.flags & 0x7900) | 0x0080 | rcode_refused;
  out[2] = flags >> 8;
  out[3] = flags & 0xff;
  if (!q.questions.empty()) {
    auto& qq = q.questions[0];
    std::vector<uint8_t> name;
    if (encode_name(qq.name, name)) {
      out[5] = 1;
      out.insert(out.end(), name.begin(), name.end());
      out.push_back(qq.type >> 8);
      out.push_back(qq.type & 0xff);
      out.push_back(qq.cls >> 8);
      out.push_back(qq.cls & 0xff);
    }
  }
  return out;
}

std::vector<uint8_t> build_query(uint16_t id, const std::string& name, uint16_t type) {
  std::vector<uint8_t> out = {uint8_t(id >> 8), uint8_t(id & 0xff), 0x01, 0x00, 0, 1, 0, 0, 0, 0,
                              0, 1};
  if (!encode_name(name, out))
    return {};
  out.insert(out.end(), {uint8_t(type >> 8), uint8_t(type & 0xff), 0, 1});
  // OPT: root name, type 41, payload 1232 (the DNS flag day size), no options.
  out.insert(out.end(), {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0});
  return out;
}

} // namespace dsec::dns
