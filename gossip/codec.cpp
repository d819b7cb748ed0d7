// The binary wire format: writers for each message body, a bounds-checked
// reader, and the frame/packet layer around them.
#include "gossip/codec.hpp"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace dsec::gossip {
namespace {

constexpr uint8_t magic0 = 'D';
constexpr uint8_t magic1 = 'G';

// -- writing ------------------------------------------------------------------

void put_varint(bytes& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v) | 0x80);
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

void put_string(bytes& out, const std::string& s) {
  put_varint(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_double(bytes& out, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

void put_load(bytes& out, const load_report& r) {
  put_varint(out, r.free_memory_mb);
  put_double(out, r.cpu_load);
  put_varint(out, r.sandboxes);
  put_varint(out, r.creating);
  out.push_back(r.accepting ? 1 : 0);
  put_varint(out, r.layers.size());
  for (const auto& l : r.layers)
    put_string(out, l);
  put_varint(out, r.seq);
}

void put_body(bytes& out, const ping_msg& m) {
  put_varint(out, m.seq);
  put_string(out, m.target);
}

void put_body(bytes& out, const ping_req_msg& m) {
  put_varint(out, m.seq);
  put_string(out, m.target);
  put_string(out, m.target_address);
}

void put_body(bytes& out, const ack_msg& m) { put_varint(out, m.seq); }

void put_body(bytes& out, const member_update_msg& m) {
  out.push_back(static_cast<uint8_t>(m.state));
  put_varint(out, m.incarnation);
  put_string(out, m.id);
  put_string(out, m.address);
  put_string(out, m.from);
}

void put_body(bytes& out, const load_update_msg& m) {
  put_string(out, m.id);
  put_varint(out, m.incarnation);
  put_load(out, m.report);
}

void put_body(bytes& out, const push_pull_msg& m) {
  out.push_back(static_cast<uint8_t>((m.join ? 1 : 0) | (m.reply ? 2 : 0)));
  put_string(out, m.from);
  put_varint(out, m.members.size());
  for (const auto& s : m.members) {
    put_string(out, s.id);
    put_string(out, s.address);
    put_varint(out, s.incarnation);
    out.push_back(static_cast<uint8_t>(s.state));
    put_varint(out, s.load_incarnation);
    put_load(out, s.load);
  }
}

template <class T>
constexpr msg_type type_of() {
  if constexpr (std::is_same_v<T, ping_msg>) return msg_type::ping;
  else if constexpr (std::is_same_v<T, ping_req_msg>) return msg_type::ping_req;
  else if constexpr (std::is_same_v<T, ack_msg>) return msg_type::ack;
  else if constexpr (std::is_same_v<T, member_update_msg>) return msg_type::member_update;
  else if constexpr (std::is_same_v<T, load_update_msg>) return msg_type::load_update;
  else return msg_type::push_pull;
}

// -- reading ------------------------------------------------------------------

/// A cursor over untrusted bytes; the first failure sticks and names its cause.
class reader {
 public:
  reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

  bool failed() const { return !why_.empty(); }
  const std::string& why() const { return why_; }
  size_t left() const { return n_ - pos_; }

  void fail(const char* what) {
    if (why_.empty())
      why_ = what;
  }

  uint8_t u8() {
    if (failed() || left() < 1)
      return fail("truncated"), 0;
    return p_[pos_++];
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = u8();
      if (failed())
        return 0;
      if (shift == 63 && b > 1)
        return fail("varint overflow"), 0;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return v;
    }
    return fail("varint too long"), 0;
  }

  uint32_t u32() {
    uint64_t v = varint();
    if (v > UINT32_MAX)
      return fail("value exceeds 32 bits"), 0;
    return static_cast<uint32_t>(v);
  }

  std::string str(size_t max) {
    uint64_t len = varint();
    if (failed())
      return {};
    if (len > max)
      return fail("string too long"), std::string{};
    if (len > left())
      return fail("truncated"), std::string{};
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  double f64() {
    if (failed() || left() < 8)
      return fail("truncated"), 0.0;
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i)
      bits |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += 8;
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isfinite(d))
      return fail("non-finite number"), 0.0;
    return d;
  }

  bool boolean() {
    uint8_t b = u8();
    if (b > 1)
      fail("bad boolean");
    return b == 1;
  }

  member_state state() {
    uint8_t s = u8();
    if (s > static_cast<uint8_t>(member_state::left))
      fail("unknown member state");
    return static_cast<member_state>(s);
  }

  /// A sub-reader over the next `len` bytes (a frame body).
  reader sub(size_t len) {
    reader r(p_ + pos_, len);
    pos_ += len;
    return r;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string why_;
};

load_report get_load(reader& r) {
  load_report l;
  l.free_memory_mb = r.varint();
  l.cpu_load = r.f64();
  l.sandboxes = r.u32();
  l.creating = r.u32();
  l.accepting = r.boolean();
  uint64_t n = r.varint();
  if (n > codec_limits::max_layers)
    return r.fail("too many layers"), l;
  for (uint64_t i = 0; i < n && !r.failed(); ++i)
    l.layers.push_back(r.str(codec_limits::max_digest));
  l.seq = r.varint();
  return l;
}

message get_ping(reader& r) {
  ping_msg m;
  m.seq = r.u32();
  m.target = r.str(codec_limits::max_id);
  return m;
}

message get_ping_req(reader& r) {
  ping_req_msg m;
  m.seq = r.u32();
  m.target = r.str(codec_limits::max_id);
  m.target_address = r.str(codec_limits::max_address);
  return m;
}

message get_ack(reader& r) { return ack_msg{r.u32()}; }

message get_member_update(reader& r) {
  member_update_msg m;
  m.state = r.state();
  m.incarnation = r.varint();
  m.id = r.str(codec_limits::max_id);
  m.address = r.str(codec_limits::max_address);
  m.from = r.str(codec_limits::max_id);
  return m;
}

message get_load_update(reader& r) {
  load_update_msg m;
  m.id = r.str(codec_limits::max_id);
  m.incarnation = r.varint();
  m.report = get_load(r);
  return m;
}

message get_push_pull(reader& r) {
  push_pull_msg m;
  uint8_t flags = r.u8();
  m.join = flags & 1;
  m.reply = flags & 2;
  m.from = r.str(codec_limits::max_id);
  uint64_t n = r.varint();
  // Each snapshot takes at least 17 bytes, so a count larger than the input
  // allows is garbage: refuse it before reserving anything.
  if (n > codec_limits::max_members || n > r.left() / 17)
    return r.fail("member count exceeds input"), m;
  m.members.reserve(n);
  for (uint64_t i = 0; i < n && !r.failed(); ++i) {
    member_snapshot s;
    s.id = r.str(codec_limits::max_id);
    s.address = r.str(codec_limits::max_address);
    s.incarnation = r.varint();
    s.state = r.state();
    s.load_incarnation = r.varint();
    s.load = get_load(r);
    m.members.push_back(std::move(s));
  }
  return m;
}

/// Decodes one frame body of a known type; false for unknown types (skipped).
bool get_body(msg_type t, reader& r, message& out) {
  switch (t) {
    case msg_type::ping: out = get_ping(r); return true;
    case msg_type::ping_req: out = get_ping_req(r); return true;
    case msg_type::ack: out = get_ack(r); return true;
    case msg_type::member_update: out = get_member_update(r); return true;
    case msg_type::load_update: out = get_load_update(r); return true;
    case msg_type::push_pull: out = get_push_pull(r); return true;
  }
  return false;
}

} // namespace

void append_header(bytes& out) {
  out.push_back(magic0);
  out.push_back(magic1);
  out.push_back(wire_version);
}

bytes encode_frame(const message& m) {
  bytes body;
  msg_type t{};
  std::visit([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    t = type_of<T>();
    put_body(body, x);
  }, m);
  bytes out;
  out.reserve(body.size() + 6);
  out.push_back(static_cast<uint8_t>(t));
  put_varint(out, body.size());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

bytes encode_packet(const std::vector<message>& msgs) {
  bytes out;
  append_header(out);
  for (const auto& m : msgs) {
    auto f = encode_frame(m);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

expected<std::vector<message>> decode_packet(const uint8_t* data, size_t size) {
  if (size > codec_limits::max_input)
    return invalid_argument("decode gossip packet: input too large");
  if (size < header_size || data[0] != magic0 || data[1] != magic1)
    return invalid_argument("decode gossip packet: bad magic");
  if (data[2] != wire_version)
    return invalid_argument("decode gossip packet: unsupported version "
                            + std::to_string(data[2]));
  reader r(data + header_size, size - header_size);
  std::vector<message> out;
  while (r.left() > 0) {
    auto type = static_cast<msg_type>(r.u8());
    uint64_t len = r.varint();
    if (!r.failed() && len > r.left())
      r.fail("frame length exceeds packet");
    if (r.failed())
      break;
    reader body = r.sub(len);
    message m;
    if (!get_body(type, body, m))
      continue;
    if (body.failed())
      return invalid_argument("decode gossip frame " + std::to_string(static_cast<int>(type))
                              + ": " + body.why());
    out.push_back(std::move(m));
  }
  if (r.failed())
    return invalid_argument("decode gossip packet: " + r.why());
  return out;
}

} // namespace dsec::gossip
