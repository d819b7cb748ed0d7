// Suspicion timer math, table-driven (the tables follow memberlist's own).
#include "gossip/suspicion.hpp"

#include <catch2/catch.hpp>

using namespace dsec::gossip;
using namespace std::chrono_literals;

TEST_CASE("suspicion minimum scales with log10 of the cluster, floored at 1", "[gossip][suspicion]") {
  struct row { size_t n; double mult; time_ms interval; time_ms want; };
  const row rows[] = {
    {0, 1, 1000ms, 1000ms},   {1, 1, 1000ms, 1000ms},    {5, 1, 1000ms, 1000ms},
    {10, 1, 1000ms, 1000ms},  {50, 1, 1000ms, 1698ms},   {100, 1, 1000ms, 2000ms},
    {500, 1, 1000ms, 2698ms}, {1000, 1, 1000ms, 3000ms}, {5, 14, 200ms, 2800ms},
    {32, 14, 200ms, 4214ms},  {1000, 14, 200ms, 8400ms}, {5, 4, 1000ms, 4000ms},
  };
  for (const auto& r : rows) {
    INFO("n=" << r.n << " mult=" << r.mult);
    CHECK(suspicion_min_timeout(r.mult, r.n, r.interval) == r.want);
  }
}

TEST_CASE("suspicion timeout shrinks with confirmations", "[gossip][suspicion]") {
  struct row { size_t c; size_t k; time_ms min; time_ms max; time_ms want; };
  const row rows[] = {
    {0, 3, 2s, 30s, 30s},      {1, 3, 2s, 30s, 16s},      {2, 3, 2s, 30s, 7810ms},
    {3, 3, 2s, 30s, 2s},       {4, 3, 2s, 30s, 2s},       {5, 3, 2s, 30s, 2s},
    {0, 0, 2s, 30s, 2s},       {0, 3, 2s, 2s, 2s},        {1, 1, 3s, 18s, 3s},
  };
  for (const auto& r : rows) {
    INFO("C=" << r.c << " K=" << r.k);
    CHECK(suspicion_timeout(r.c, r.k, r.min, r.max) == r.want);
  }
}

TEST_CASE("expected confirmations drop to 0 when too few peers exist", "[gossip][suspicion]") {
  struct row { size_t k; size_t n; size_t want; };
  const row rows[] = {{3, 0, 0}, {3, 1, 0}, {3, 4, 0}, {3, 5, 3}, {3, 100, 3}, {0, 100, 0}};
  for (const auto& r : rows)
    CHECK(suspicion_expected_confirmations(r.k, r.n) == r.want);
}

TEST_CASE("a suspicion counts distinct confirmations up to k", "[gossip][suspicion]") {
  suspicion s("a", 3, 2s, 30s, 100s);
  CHECK(s.deadline() == 130s);
  CHECK_FALSE(s.confirm("a"));  // the originator does not confirm itself
  CHECK(s.confirm("b"));
  CHECK(s.deadline() == 116s);
  CHECK_FALSE(s.confirm("b"));  // duplicates do not count
  CHECK(s.confirm("c"));
  CHECK(s.deadline() == 100s + 7810ms);
  CHECK(s.confirm("d"));
  CHECK(s.deadline() == 102s);
  CHECK_FALSE(s.confirm("e"));  // past k nothing changes
  CHECK(s.confirmations() == 3);
}

TEST_CASE("the minimum's node scale is capped, never below the unscaled minimum",
          "[gossip][suspicion]") {
  struct row { double mult; size_t n; time_ms cap; time_ms want; };
  const row rows[] = {
      {14, 5, 3s, 2800ms},     // small clusters: the unscaled minimum
      {14, 10, 3s, 2800ms},
      {14, 160, 3s, 3s},       // 6.17 s uncapped: the scale unit
      {14, 1000, 3s, 3s},
      {14, 160, 10s, 6171ms},  // a cap above the scaled value changes nothing
      {14, 160, 1s, 2800ms},   // a cap below the unscaled minimum does not apply
  };
  for (const auto& r : rows) {
    INFO("mult=" << r.mult << " n=" << r.n << " cap=" << r.cap.count());
    CHECK(suspicion_min_timeout(r.mult, r.n, 200ms, r.cap) == r.want);
  }
}
