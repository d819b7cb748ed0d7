// One memberlist driven by hand through a recording transport: precedence of
// incarnations and states, refutation, the probe cycle, load updates, garbage.
#include "gossip/codec.hpp"
#include "gossip/memberlist.hpp"

#include <catch2/catch.hpp>

using namespace dsec::gossip;
using namespace std::chrono_literals;

namespace {

/// Records what the node sends.
struct recording_transport : transport {
  struct sent { std::string to; std::vector<message> msgs; bool stream; };
  std::vector<sent> log;

  void send_packet(const std::string& to, bytes data) override { record(to, data, false); }
  void send_stream(const std::string& to, bytes data) override { record(to, data, true); }

  void record(const std::string& to, const bytes& data, bool stream) {
    auto msgs = decode_packet(data);
    REQUIRE(msgs.ok());
    log.push_back({to, *msgs, stream});
  }

  template <class T>
  std::vector<std::pair<std::string, T>> find() const {
    std::vector<std::pair<std::string, T>> out;
    for (const auto& s : log)
      for (const auto& m : s.msgs)
        if (auto* x = std::get_if<T>(&m))
          out.emplace_back(s.to, *x);
    return out;
  }
};

config node_config(const std::string& id) {
  config c;
  c.id = id;
  c.address = id + ":7946";
  return c;
}

bytes update(member_state s, uint64_t inc, const std::string& id, const std::string& from = "x") {
  return encode_packet({member_update_msg{s, inc, id, id + ":7946", from}});
}

} // namespace

TEST_CASE("incarnation and state precedence", "[gossip][memberlist]") {
  using st = member_state;
  struct step { st state; uint64_t inc; };
  struct row { std::vector<step> steps; st want; uint64_t want_inc; };
  const row rows[] = {
    {{{st::alive, 5}}, st::alive, 5},
    {{{st::alive, 5}, {st::alive, 4}}, st::alive, 5},          // older alive ignored
    {{{st::alive, 5}, {st::suspect, 5}}, st::suspect, 5},      // suspect beats alive, same inc
    {{{st::alive, 5}, {st::suspect, 4}}, st::alive, 5},        // old suspicion ignored
    {{{st::alive, 5}, {st::suspect, 5}, {st::alive, 5}}, st::suspect, 5},  // refute needs inc+1
    {{{st::alive, 5}, {st::suspect, 5}, {st::alive, 6}}, st::alive, 6},
    {{{st::alive, 5}, {st::dead, 5}}, st::dead, 5},            // dead beats alive
    {{{st::alive, 5}, {st::suspect, 5}, {st::dead, 5}}, st::dead, 5},
    {{{st::alive, 5}, {st::dead, 5}, {st::alive, 5}}, st::dead, 5},
    {{{st::alive, 5}, {st::dead, 5}, {st::alive, 6}}, st::alive, 6},  // rejoin
    {{{st::alive, 5}, {st::dead, 4}}, st::alive, 5},
    {{{st::alive, 5}, {st::left, 5}}, st::left, 5},
    {{{st::alive, 5}, {st::dead, 5}, {st::left, 5}}, st::left, 5},   // left beats dead
    {{{st::alive, 5}, {st::left, 5}, {st::dead, 6}}, st::left, 5},   // nothing but alive+ beats left
    {{{st::alive, 5}, {st::left, 5}, {st::suspect, 6}}, st::left, 5},
    {{{st::suspect, 5}}, st::alive, 0},                       // unknown members: only alive adds
  };
  int i = 0;
  for (const auto& r : rows) {
    INFO("row " << i++);
    recording_transport net;
    memberlist a(node_config("a"), net, 1, 0ms);
    for (const auto& s : r.steps)
      REQUIRE(a.handle_packet("x:1", update(s.state, s.inc, "b"), 1ms).ok());
    const member* b = a.find("b");
    if (r.want_inc == 0 && r.want == st::alive) {
      CHECK(b == nullptr);
      continue;
    }
    REQUIRE(b);
    CHECK(b->state == r.want);
    CHECK(b->incarnation == r.want_inc);
  }
}

TEST_CASE("a suspected or dead node refutes with a higher incarnation", "[gossip][memberlist]") {
  for (member_state s : {member_state::suspect, member_state::dead, member_state::left}) {
    recording_transport net;
    memberlist a(node_config("a"), net, 1, 0ms);
    REQUIRE(a.handle_packet("x:1", update(member_state::alive, 0, "b"), 1ms).ok());
    REQUIRE(a.handle_packet("x:1", update(s, 4, "a", "b"), 2ms).ok());
    CHECK(a.self().incarnation == 5);
    CHECK(a.self().state == member_state::alive);
    // The refutation goes out with the next gossip.
    a.tick(1s);
    bool refuted = false;
    for (const auto& [to, u] : net.find<member_update_msg>())
      refuted |= u.id == "a" && u.state == member_state::alive && u.incarnation == 5;
    CHECK(refuted);
  }
}

TEST_CASE("events report joins, suspicion, refutation and death", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  REQUIRE(a.handle_packet("x:1", update(member_state::alive, 1, "b"), 1ms).ok());
  REQUIRE(a.handle_packet("x:1", update(member_state::suspect, 1, "b"), 2ms).ok());
  REQUIRE(a.handle_packet("x:1", update(member_state::alive, 2, "b"), 3ms).ok());
  REQUIRE(a.handle_packet("x:1", update(member_state::dead, 2, "b"), 4ms).ok());
  auto ev = a.take_events();
  REQUIRE(ev.size() == 4);
  CHECK(ev[0].kind == event_kind::joined);
  CHECK(ev[1].kind == event_kind::suspect);
  CHECK(ev[2].kind == event_kind::updated);
  CHECK(ev[3].kind == event_kind::dead);
  CHECK(a.take_events().empty());
}

TEST_CASE("the probe cycle: ping, ping-req, suspect, dead", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  REQUIRE(a.handle_packet("x:1", update(member_state::alive, 0, "b"), 0ms).ok());
  REQUIRE(a.handle_packet("x:1", update(member_state::alive, 0, "c"), 0ms).ok());
  // Run one probe period from the first ping; nobody answers.
  time_ms t = 0ms;
  while (net.find<ping_msg>().empty() && t < 1s)
    a.tick(t = a.next_wakeup());
  auto pings = net.find<ping_msg>();
  REQUIRE(pings.size() == 1);
  std::string target = pings[0].second.target;
  time_ms sent = t;
  a.tick(sent + a.cfg().probe_timeout);
  auto reqs = net.find<ping_req_msg>();
  REQUIRE(reqs.size() == 1);  // the only other peer
  CHECK(reqs[0].second.target == target);
  CHECK(reqs[0].first != target + ":7946");
  a.tick(sent + a.cfg().probe_interval);
  REQUIRE(a.find(target)->state == member_state::suspect);
  // n = 3 < K + 2: no confirmations expected, the minimum applies.
  time_ms min = suspicion_min_timeout(a.cfg().suspicion_mult, 3, a.cfg().probe_interval);
  a.tick(sent + a.cfg().probe_interval + min - 1ms);
  CHECK(a.find(target)->state == member_state::suspect);
  a.tick(sent + a.cfg().probe_interval + min);
  CHECK(a.find(target)->state == member_state::dead);
}

TEST_CASE("an ack keeps the target alive; an indirect ack too", "[gossip][memberlist]") {
  for (bool indirect : {false, true}) {
    recording_transport net;
    memberlist a(node_config("a"), net, 1, 0ms);
    REQUIRE(a.handle_packet("x:1", update(member_state::alive, 0, "b"), 0ms).ok());
    REQUIRE(a.handle_packet("x:1", update(member_state::alive, 0, "c"), 0ms).ok());
    time_ms t = 0ms;
    while (net.find<ping_msg>().empty() && t < 1s)
      a.tick(t = a.next_wakeup());
    auto ping = net.find<ping_msg>().at(0).second;
    if (indirect)
      a.tick(t + a.cfg().probe_timeout);
    REQUIRE(a.handle_packet("y:1", encode_packet({ack_msg{ping.seq}}), t + 150ms).ok());
    a.tick(t + a.cfg().probe_interval);
    CHECK(a.find(ping.target)->state == member_state::alive);
  }
}

TEST_CASE("a ping-req is forwarded and its ack relayed", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  REQUIRE(a.handle_packet("c:7946", encode_packet({ping_req_msg{9, "b", "b:7946"}}), 1ms).ok());
  auto pings = net.find<ping_msg>();
  REQUIRE(pings.size() == 1);
  CHECK(pings[0].first == "b:7946");
  REQUIRE(a.handle_packet("b:7946", encode_packet({ack_msg{pings[0].second.seq}}), 2ms).ok());
  auto acks = net.find<ack_msg>();
  REQUIRE(acks.size() == 1);
  CHECK(acks[0].first == "c:7946");
  CHECK(acks[0].second.seq == 9);
}

TEST_CASE("pings for another node id are not answered", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  REQUIRE(a.handle_packet("c:7946", encode_packet({ping_msg{1, "old-a"}}), 1ms).ok());
  CHECK(net.find<ack_msg>().empty());
  REQUIRE(a.handle_packet("c:7946", encode_packet({ping_msg{2, "a"}}), 1ms).ok());
  CHECK(net.find<ack_msg>().size() == 1);
}

TEST_CASE("newer load reports win, older ones are ignored", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  REQUIRE(a.handle_packet("x:1", update(member_state::alive, 1, "b"), 0ms).ok());
  auto load = [](uint64_t inc, uint64_t seq, uint32_t sandboxes) {
    load_report r;
    r.seq = seq;
    r.sandboxes = sandboxes;
    return encode_packet({load_update_msg{"b", inc, r}});
  };
  REQUIRE(a.handle_packet("x:1", load(1, 5, 50), 1ms).ok());
  REQUIRE(a.handle_packet("x:1", load(1, 4, 40), 2ms).ok());
  CHECK(a.find("b")->load.sandboxes == 50);
  REQUIRE(a.handle_packet("x:1", load(2, 1, 10), 3ms).ok());  // new incarnation wins
  CHECK(a.find("b")->load.sandboxes == 10);
  CHECK(a.find("b")->load_incarnation == 2);
}

TEST_CASE("set_local_load assigns seq and bounds layers", "[gossip][memberlist]") {
  recording_transport net;
  config c = node_config("a");
  c.max_layers_in_report = 2;
  memberlist a(c, net, 1, 0ms);
  load_report r;
  r.layers = {"l1", "l2", "l3"};
  r.seq = 1000;
  a.set_local_load(r, 0ms);
  a.set_local_load(r, 1ms);
  CHECK(a.self().load.seq == 2);
  CHECK(a.self().load.layers.size() == 2);
  CHECK(a.pending_broadcasts() == 2);  // self alive + one (replaced) load report
}

TEST_CASE("garbage packets are errors, not crashes", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  auto s = a.handle_packet("x:1", bytes{1, 2, 3, 4}, 0ms);
  CHECK_FALSE(s.ok());
  CHECK_THAT(s.err().message, Catch::Contains("x:1"));
  CHECK_FALSE(a.handle_stream("x:1", bytes{'D', 'G', 1, 6, 50}, 0ms).ok());
  CHECK(a.traffic().decode_errors == 2);
}

TEST_CASE("join pushes state to the seeds and skips our own address", "[gossip][memberlist]") {
  recording_transport net;
  memberlist a(node_config("a"), net, 1, 0ms);
  CHECK_FALSE(a.join({""}, 0ms).ok());
  memberlist long_id(node_config(std::string(300, 'x')), net, 1, 0ms);
  CHECK_FALSE(long_id.join({}, 0ms).ok());
  REQUIRE(a.join({"a:7946", "s:7946"}, 0ms).ok());
  auto pp = net.find<push_pull_msg>();
  REQUIRE(pp.size() == 1);
  CHECK(pp[0].first == "s:7946");
  CHECK(pp[0].second.join);
  // No answer: retried after join_retry_interval.
  a.tick(a.cfg().join_retry_interval);
  CHECK(net.find<push_pull_msg>().size() == 2);
}
