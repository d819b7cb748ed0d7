// The wire codec: round trips of every message, and garbage, truncated or
// corrupted input that must come back as an error (never a crash; run under
// ASan/UBSan to make "never UB" a checked claim).
#include "gossip/codec.hpp"

#include <catch2/catch.hpp>

#include <random>

using namespace dsec::gossip;

namespace {

load_report sample_load() {
  load_report r;
  r.free_memory_mb = 123456;
  r.cpu_load = 0.75;
  r.sandboxes = 42;
  r.creating = 3;
  r.accepting = false;
  r.layers = {"sha256:aaaa", "sha256:bbbb"};
  r.seq = 99;
  return r;
}

std::vector<message> sample_messages() {
  push_pull_msg pp;
  pp.join = true;
  pp.from = "node-1";
  pp.members.push_back({"node-1", "10.0.0.1:7946", 7, member_state::alive, 7, sample_load()});
  pp.members.push_back({"node-2", "10.0.0.2:7946", 1ull << 40, member_state::left, 0, {}});
  return {
    ping_msg{1, "node-2"},
    ping_req_msg{UINT32_MAX, "node-3", "10.0.0.3:7946"},
    ack_msg{77},
    member_update_msg{member_state::suspect, 12, "node-4", "10.0.0.4:7946", "node-1"},
    load_update_msg{"node-5", 3, sample_load()},
    pp,
  };
}

bool same(const member_snapshot& a, const member_snapshot& b) {
  return a.id == b.id && a.address == b.address && a.incarnation == b.incarnation
         && a.state == b.state && a.load_incarnation == b.load_incarnation && a.load == b.load;
}

bool same(const message& a, const message& b) {
  if (a.index() != b.index())
    return false;
  if (auto* x = std::get_if<ping_msg>(&a)) {
    auto& y = std::get<ping_msg>(b);
    return x->seq == y.seq && x->target == y.target;
  }
  if (auto* x = std::get_if<ping_req_msg>(&a)) {
    auto& y = std::get<ping_req_msg>(b);
    return x->seq == y.seq && x->target == y.target && x->target_address == y.target_address;
  }
  if (auto* x = std::get_if<ack_msg>(&a))
    return x->seq == std::get<ack_msg>(b).seq;
  if (auto* x = std::get_if<member_update_msg>(&a)) {
    auto& y = std::get<member_update_msg>(b);
    return x->state == y.state && x->incarnation == y.incarnation && x->id == y.id
           && x->address == y.address && x->from == y.from;
  }
  if (auto* x = std::get_if<load_update_msg>(&a)) {
    auto& y = std::get<load_update_msg>(b);
    return x->id == y.id && x->incarnation == y.incarnation && x->report == y.report;
  }
  auto& x = std::get<push_pull_msg>(a);
  auto& y = std::get<push_pull_msg>(b);
  if (x.join != y.join || x.reply != y.reply || x.from != y.from
      || x.members.size() != y.members.size())
    return false;
  for (size_t i = 0; i < x.members.size(); ++i)
    if (!same(x.members[i], y.members[i]))
      return false;
  return true;
}

} // namespace

TEST_CASE("every message survives a round trip", "[gossip][codec]") {
  for (const auto& m : sample_messages()) {
    auto out = decode_packet(encode_packet({m}));
    REQUIRE(out.ok());
    REQUIRE(out->size() == 1);
    CHECK(same(m, out->front()));
  }
  auto all = sample_messages();
  auto out = decode_packet(encode_packet(all));
  REQUIRE(out.ok());
  REQUIRE(out->size() == all.size());
  for (size_t i = 0; i < all.size(); ++i)
    CHECK(same(all[i], (*out)[i]));
}

TEST_CASE("headers are checked", "[gossip][codec]") {
  struct row { bytes in; const char* why; };
  const row rows[] = {
    {{}, "bad magic"},
    {{'D'}, "bad magic"},
    {{'X', 'G', 1}, "bad magic"},
    {{'D', 'G', 2}, "unsupported version"},
    {{'D', 'G', 0}, "unsupported version"},
  };
  for (const auto& r : rows) {
    auto out = decode_packet(r.in);
    REQUIRE_FALSE(out.ok());
    CHECK(out.err().code == dsec::errc::invalid_argument);
    CHECK_THAT(out.err().message, Catch::Contains(r.why));
  }
  auto empty = decode_packet(bytes{'D', 'G', 1});
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("malformed bodies are rejected with a reason", "[gossip][codec]") {
  struct row { bytes in; const char* why; };
  const row rows[] = {
    // frame length beyond the packet
    {{'D', 'G', 1, 3, 5, 1}, "frame length exceeds packet"},
    // ack with an 11-byte varint
    {{'D', 'G', 1, 3, 11, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "varint"},
    // ack seq above 32 bits
    {{'D', 'G', 1, 3, 5, 0x80, 0x80, 0x80, 0x80, 0x10}, "32 bits"},
    // ping with a string longer than its frame
    {{'D', 'G', 1, 1, 3, 1, 9, 'a'}, "truncated"},
    // member update with an unknown state
    {{'D', 'G', 1, 4, 5, 9, 0, 0, 0, 0}, "unknown member state"},
    // push/pull claiming a million members in a few bytes
    {{'D', 'G', 1, 6, 6, 0, 0, 0x80, 0x84, 0x3d, 0}, "member count"},
  };
  for (const auto& r : rows) {
    auto out = decode_packet(r.in);
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.err().message, Catch::Contains(r.why));
  }
}

TEST_CASE("unknown frame types and trailing body bytes are skipped", "[gossip][codec]") {
  bytes in = {'D', 'G', 1, 200, 2, 0xaa, 0xbb, 3, 3, 7, 0xee, 0xff};
  auto out = decode_packet(in);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 1);
  CHECK(std::get<ack_msg>(out->front()).seq == 7);
}

TEST_CASE("every truncation of a valid packet decodes or fails cleanly", "[gossip][codec]") {
  bytes full = encode_packet(sample_messages());
  size_t ok = 0;
  for (size_t n = 0; n < full.size(); ++n) {
    bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    auto out = decode_packet(cut);
    if (out.ok())
      ++ok;  // cut exactly at a frame boundary
  }
  CHECK(ok <= sample_messages().size() + 1);
}

TEST_CASE("random bytes and bit flips never crash the decoder", "[gossip][codec]") {
  std::mt19937_64 rng(42);
  bytes valid = encode_packet(sample_messages());
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b;
    if (i % 2 == 0) {
      // pure noise behind a valid header half of the time
      b.resize(rng() % 300);
      for (auto& x : b)
        x = static_cast<uint8_t>(rng());
      if (i % 4 == 0 && b.size() >= 3)
        b[0] = 'D', b[1] = 'G', b[2] = 1;
    } else {
      b = valid;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips)
        b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    auto out = decode_packet(b);
    if (out.ok())
      ++accepted;
  }
  SUCCEED("decoded " << accepted << " of 20000 mutated inputs without a crash");
}
