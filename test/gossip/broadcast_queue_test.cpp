// The broadcast queue: retransmit limits, invalidation, ordering, packing.
#include "gossip/broadcast_queue.hpp"

#include <catch2/catch.hpp>

using namespace dsec::gossip;

namespace {
bytes frame(uint8_t tag, size_t size) { return bytes(size, tag); }
} // namespace

TEST_CASE("retransmit limit is mult * ceil(log10(n + 1))", "[gossip][queue]") {
  struct row { size_t mult; size_t n; size_t want; };
  const row rows[] = {{4, 1, 4},   {4, 9, 4},   {4, 10, 8},   {4, 99, 8},
                      {4, 100, 12}, {4, 999, 12}, {4, 1000, 16}, {3, 32, 6}};
  for (const auto& r : rows) {
    INFO("mult=" << r.mult << " n=" << r.n);
    CHECK(retransmit_limit(r.mult, r.n) == r.want);
  }
}

TEST_CASE("a newer broadcast about the same subject replaces the older", "[gossip][queue]") {
  broadcast_queue q;
  q.push(broadcast_kind::membership, "a", frame(1, 10));
  q.take(1000, 10);  // one transmit on the old one
  CHECK(q.transmits(broadcast_kind::membership, "a") == 1);
  q.push(broadcast_kind::membership, "a", frame(2, 10));
  q.push(broadcast_kind::load, "a", frame(3, 10));
  CHECK(q.size() == 2);
  CHECK(q.transmits(broadcast_kind::membership, "a") == 0);
  auto got = q.take(1000, 10);
  REQUIRE(got.size() == 2);
  CHECK(got[0] == frame(2, 10));  // membership before load, old one gone
  CHECK(got[1] == frame(3, 10));
}

TEST_CASE("broadcasts are dropped after the retransmit limit", "[gossip][queue]") {
  for (size_t limit : {1u, 2u, 4u, 12u}) {
    broadcast_queue q;
    q.push(broadcast_kind::membership, "a", frame(1, 5));
    size_t sends = 0;
    while (!q.take(100, limit).empty())
      ++sends;
    CHECK(sends == limit);
    CHECK(q.size() == 0);
  }
}

TEST_CASE("fewest transmits go first and the budget is respected", "[gossip][queue]") {
  broadcast_queue q;
  q.push(broadcast_kind::membership, "old", frame(1, 40));
  q.take(100, 10);  // old: 1 transmit
  q.push(broadcast_kind::membership, "new", frame(2, 40));
  auto got = q.take(50, 10);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == frame(2, 40));
  // A frame too big for the rest of the budget is skipped, a smaller one fits.
  q.push(broadcast_kind::membership, "big", frame(3, 80));
  q.push(broadcast_kind::membership, "small", frame(4, 10));
  got = q.take(60, 10);
  REQUIRE(got.size() == 2);
  size_t total = 0;
  for (auto& f : got)
    total += f.size();
  CHECK(total <= 60);
  CHECK(q.contains(broadcast_kind::membership, "big"));
}
