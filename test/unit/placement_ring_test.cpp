// The placement ring (policy/placement_ring.hpp): every entry walks the same
// ring from its own position, so a burst from many entries is even before any
// load report has arrived. Table-driven, no actors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>

#include "policy/placement_ring.hpp"

using namespace dsec;

namespace {

member_info node(std::string id, int64_t sandboxes = 0, int64_t free_mb = 64000,
                 std::string state = "alive", bool accepting = true) {
  member_info m;
  m.id = std::move(id);
  m.address = "127.0.0.1:1";
  m.state = std::move(state);
  m.free_memory_mb = free_mb;
  m.sandboxes = sandboxes;
  m.accepting = accepting;
  return m;
}

std::vector<member_info> cluster(size_t n) {
  std::vector<member_info> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(node("n" + std::to_string(i)));
  return v;
}

sandbox_spec spec(int64_t mem = 256) {
  sandbox_spec s;
  s.layers = {"base/busybox@1"};
  s.memory_mb = mem;
  return s;
}

double max_over_mean(const std::map<std::string, int>& hits, size_t n) {
  double sum = 0, mx = 0;
  for (auto& [id, c] : hits) {
    sum += c;
    mx = std::max<double>(mx, c);
  }
  return mx / (sum / static_cast<double>(n));
}

} // namespace

TEST_CASE("ring: the same order at every node, candidates only", "[placement][ring]") {
  auto view = cluster(6);
  view.push_back(node("dead", 0, 64000, "dead"));
  view.push_back(node("draining", 0, 64000, "alive", false));
  view.push_back(node("suspect", 0, 64000, "suspect"));
  auto order = placement::ring_order(view);
  CHECK(order.size() == 6);
  std::reverse(view.begin(), view.end());
  CHECK(placement::ring_order(view) == order);
  CHECK(std::find(order.begin(), order.end(), "dead") == order.end());
  CHECK(std::find(order.begin(), order.end(), "draining") == order.end());
}

TEST_CASE("ring: one entry is round robin, starting at itself", "[placement][ring]") {
  auto view = cluster(5);
  auto ring = placement::ring_order(view);
  placement::ring_cursor cursor;
  std::map<std::string, int> hits;
  for (int i = 0; i < 15; ++i) {
    auto order = placement::plan_ring(view, "n3", spec(), {}, {}, cursor);
    REQUIRE(order.size() == 5);
    if (i == 0)
      CHECK(order.front() == "n3");
    ++hits[order.front()];
    // A refusal's retry is the next ring member.
    auto pos = std::find(ring.begin(), ring.end(), order[0]) - ring.begin();
    CHECK(order[1] == ring[(pos + 1) % ring.size()]);
  }
  REQUIRE(hits.size() == 5);
  for (auto& [id, c] : hits)
    CHECK(c == 3);
}

TEST_CASE("ring: many entries with uneven rates still sum to an even spread",
          "[placement][ring]") {
  // 160 entries, each placing a Poisson number of creates around 31: the
  // first second of a 5,000/s burst. Every report still says 0 sandboxes.
  const size_t n = 160;
  auto view = cluster(n);
  std::mt19937_64 rng{28};
  std::poisson_distribution<int> creates(31);
  std::map<std::string, int> ring_hits, random_hits;
  std::uniform_int_distribution<size_t> any(0, n - 1);
  for (size_t e = 0; e < n; ++e) {
    placement::ring_cursor cursor;
    int c = creates(rng);
    for (int i = 0; i < c; ++i) {
      ++ring_hits[placement::plan_ring(view, view[e].id, spec(), {}, {}, cursor).front()];
      ++random_hits[view[any(rng)].id];
    }
  }
  CHECK(max_over_mean(ring_hits, n) <= 1.25);
  CHECK(max_over_mean(random_hits, n) > 1.3); // what it replaces: Poisson spread
}

TEST_CASE("ring: steps over a member that does not fit or holds far more than the mean",
          "[placement][ring]") {
  auto view = cluster(4);
  auto ring = placement::ring_order(view);
  auto at = [&](const std::string& id) -> member_info& {
    return *std::find_if(view.begin(), view.end(), [&](auto& m) { return m.id == id; });
  };
  // Everyone near 100; the entry's cursor member reported 10 MiB free.
  for (auto& m : view)
    m.sandboxes = 100;
  at(ring[1]).free_memory_mb = 10;
  placement::ring_cursor cursor;
  cursor.advance(1); // the entry is ring[0]: its next turn is ring[1]
  auto order = placement::plan_ring(view, ring[0], spec(), {}, {}, cursor);
  CHECK(order.front() == ring[2]);
  CHECK(order[1] == ring[3]);
  CHECK(order.back() == ring[1]); // last resort only
  // The turn after is past the member that took it, not the skipped one.
  order = placement::plan_ring(view, ring[0], spec(), {}, {}, cursor);
  CHECK(order.front() == ring[3]);

  // Far above the mean (a node the reports show heavy): stepped over. A
  // difference the size of report staleness in a burst is not.
  at(ring[1]).free_memory_mb = 64000;
  at(ring[1]).sandboxes = 400;
  placement::ring_cursor c2;
  c2.advance(1);
  CHECK(placement::plan_ring(view, ring[0], spec(), {}, {}, c2).front() == ring[2]);
  at(ring[1]).sandboxes = 160;
  placement::ring_cursor c3;
  c3.advance(1);
  CHECK(placement::plan_ring(view, ring[0], spec(), {}, {}, c3).front() == ring[1]);
  // Creates this entry already sent count toward it too.
  std::map<std::string, int64_t> placed = {{ring[1], 300}};
  placement::ring_cursor c4;
  c4.advance(1);
  CHECK(placement::plan_ring(view, ring[0], spec(), placed, {}, c4).front() == ring[2]);
}

TEST_CASE("ring: hop limit, a draining entry, and nothing to place on", "[placement][ring]") {
  auto view = cluster(20);
  placement::policy pol;
  pol.max_attempts = 3;
  placement::ring_cursor cursor;
  CHECK(placement::plan_ring(view, "n0", spec(), {}, pol, cursor).size() == 3);
  // A draining entry is not on the ring but still places, from where it would be.
  view[0].accepting = false;
  auto order = placement::plan_ring(view, "n0", spec(), {}, pol, cursor);
  REQUIRE(order.size() == 3);
  CHECK(std::find(order.begin(), order.end(), "n0") == order.end());
  for (auto& m : view)
    m.state = "dead";
  CHECK(placement::plan_ring(view, "n0", spec(), {}, pol, cursor).empty());
}

TEST_CASE("place: the policy's spread picks ring or best-of-k sampling", "[placement][ring]") {
  auto view = cluster(10);
  placement::ledger led;
  placement::ring_cursor cursor;
  std::mt19937_64 rng{1};
  placement::policy pol;
  CHECK(pol.spread == placement::policy::spread_mode::ring);
  std::map<std::string, int> hits;
  for (int i = 0; i < 10; ++i)
    ++hits[placement::place(view, "n4", spec(), led, pol, cursor, rng).front()];
  CHECK(hits.size() == 10);
  pol.spread = placement::policy::spread_mode::sample;
  // Best-of-2 with this node in the sample: an idle cluster keeps it local.
  CHECK(placement::place(view, "n4", spec(), led, pol, cursor, rng).front() == "n4");
}
