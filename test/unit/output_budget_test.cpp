// The node-wide kept-output budget (core/output_budget.hpp) and the port-scan
// event (core/port_scan.hpp), issue 29 part 4: holders take what fits, roll
// by dropping their own oldest bytes once the budget is full (keeping their
// newest `floor`), give everything back when they go; a scan is one event.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/output_budget.hpp"
#include "core/port_scan.hpp"

using namespace dsec;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

/// A holder of one stream: its bytes and its charge, grown as a command
/// prints `n` bytes at a time.
struct holder {
  explicit holder(output_budget& b) : charge(&b) {}
  uint64_t kept = 0;
  output_charge charge;
  void print(uint64_t n) {
    kept -= charge.grow(kept, n);
    kept += n;
  }
};

} // namespace

TEST_CASE("output under the budget is kept whole and given back", "[output_budget]") {
  output_budget b;
  b.set_limit(4 * MiB);
  {
    holder h(b);
    for (int i = 0; i < 32; ++i)
      h.print(64 * KiB);
    CHECK(h.kept == 2 * MiB);
    CHECK(b.used() == 2 * MiB);
    CHECK(h.charge.dropped() == 0);
  }
  CHECK(b.used() == 0);
  CHECK(b.peak() == 2 * MiB);
  CHECK(b.dropped() == 0);
}

TEST_CASE("a full budget makes each holder drop its own oldest bytes", "[output_budget]") {
  struct row { uint64_t limit; int holders; uint64_t chunk; int chunks; };
  const row rows[] = {
    {1 * MiB, 1, 64 * KiB, 200},  {1 * MiB, 3, 64 * KiB, 200}, {4 * MiB, 8, 16 * KiB, 1000},
    {256 * KiB, 5, 4 * KiB, 500}, {8 * MiB, 2, 64 * KiB, 512},
  };
  for (const auto& r : rows) {
    INFO(r.limit << " " << r.holders << " " << r.chunk << " " << r.chunks);
    output_budget b;
    b.set_limit(r.limit);
    std::vector<holder> hs;
    hs.reserve(r.holders);
    for (int i = 0; i < r.holders; ++i)
      hs.emplace_back(b);
    uint64_t printed = 0;
    for (int c = 0; c < r.chunks; ++c)
      for (auto& h : hs) {
        h.print(r.chunk);
        printed += r.chunk;
        // Never past the budget by more than the holders' floors and a chunk each.
        CHECK(b.used() <= r.limit + r.holders * (output_budget::floor + r.chunk));
      }
    uint64_t kept = 0, dropped = 0;
    for (auto& h : hs) {
      kept += h.kept;
      dropped += h.charge.dropped();
      CHECK(h.kept >= std::min<uint64_t>(output_budget::floor, r.chunk * r.chunks));
      CHECK(h.charge.bytes() == h.kept);
    }
    CHECK(kept + dropped == printed);
    CHECK(b.used() == kept);
    CHECK(b.dropped() == dropped);
    hs.clear();
    CHECK(b.used() == 0);
  }
}

TEST_CASE("a quiet holder keeps its floor while a noisy one fills the node", "[output_budget]") {
  output_budget b;
  b.set_limit(1 * MiB);
  holder noisy(b), quiet(b);
  for (int i = 0; i < 100; ++i)
    noisy.print(64 * KiB);
  quiet.print(10 * KiB);
  quiet.print(10 * KiB);
  CHECK(quiet.kept == 20 * KiB);
  CHECK(quiet.charge.dropped() == 0);
  CHECK(noisy.charge.dropped() > 0);
}

TEST_CASE("no limit keeps everything; moved charges give back once", "[output_budget]") {
  output_budget b;
  b.set_limit(0);
  holder h(b);
  for (int i = 0; i < 100; ++i)
    h.print(1 * MiB);
  CHECK(h.charge.dropped() == 0);
  CHECK(b.used() == 100 * MiB);
  output_charge moved = std::move(h.charge);
  CHECK(h.charge.bytes() == 0);
  h.charge.release();
  CHECK(b.used() == 100 * MiB);
  moved.release();
  CHECK(b.used() == 0);
  output_charge none; // no budget: counts nothing
  CHECK(none.grow(0, 5 * MiB) == 0);
}

TEST_CASE("a cut stream begins with a marker counting what it lost", "[output_budget]") {
  output_budget b;
  b.set_limit(256 * KiB);
  output_charge charge(&b);
  kept_stream ks;
  std::string kept;
  uint64_t printed = 0;
  int64_t lost_total = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string chunk(1000, char('a' + i % 26));
    lost_total += ks.append(kept, chunk, charge);
    printed += chunk.size();
    auto body = kept.size() - ks.marker;
    REQUIRE(body + ks.dropped == printed);
    REQUIRE(int64_t(printed) - int64_t(kept.size()) == lost_total);
  }
  REQUIRE(ks.dropped > 0);
  CHECK(kept.compare(0, ks.marker, dropped_marker(ks.dropped)) == 0);
  CHECK(kept.rfind(std::string(1000, char('a' + 999 % 26))) == kept.size() - 1000);
  CHECK(charge.bytes() == kept.size() - ks.marker);
  CHECK(b.used() <= 256 * KiB + output_budget::floor);
  CHECK(dropped_marker(7) == "[dsec: 7 bytes of earlier output dropped (node output budget)]\n");
  // Under the budget nothing is cut and no marker shows.
  output_budget roomy;
  output_charge c2(&roomy);
  kept_stream k2;
  std::string s2;
  CHECK(k2.append(s2, "hello\n", c2) == 0);
  CHECK(s2 == "hello\n");
  CHECK(k2.marker == 0);
}

TEST_CASE("the budget's metrics name limit, held, peak and drops", "[output_budget]") {
  output_budget b;
  b.set_limit(3 * MiB);
  auto text = b.metrics_text("n1");
  CHECK(text.find("dsec_output_budget_bytes{node=\"n1\"} 3145728") != std::string::npos);
  CHECK(text.find("dsec_output_kept_bytes{node=\"n1\"} 0") != std::string::npos);
  CHECK(text.find("dsec_output_dropped_bytes_total") != std::string::npos);
}

TEST_CASE("a sweep of many targets is one port-scan event", "[port_scan]") {
  port_scan_watch w;
  auto before = port_scans_total().load();
  int raised = 0;
  int64_t attempts = 0;
  for (int host = 1; host <= 20; ++host) {
    denial_counts d;
    for (int port = 0; port < 16; ++port) {
      ++attempts;
      d.recent.push_back("net 10.0.0." + std::to_string(host) + ":" + std::to_string(20 + port));
    }
    d.network = attempts;
    raised += observe_port_scan(w, d);
    CHECK(d.recent.size() <= 16);
    if (w.reported)
      CHECK(d.recent.front().rfind("net port-scan: " + std::to_string(attempts), 0) == 0);
  }
  CHECK(raised == 1);
  CHECK(port_scans_total().load() == before + 1);
}

TEST_CASE("retries to one blocked target or a few denials are no scan", "[port_scan]") {
  struct row { int64_t network; int targets; bool scan; };
  const row rows[] = {
    {1000, 1, false}, {1000, 7, false}, {31, 16, false}, {32, 8, true}, {5000, 16, true},
  };
  for (const auto& r : rows) {
    INFO(r.network << " " << r.targets);
    port_scan_watch w;
    denial_counts d;
    d.network = r.network;
    for (int i = 0; i < 16; ++i)
      d.recent.push_back("net 192.0.2.1:" + std::to_string(443 + i % r.targets));
    d.recent.push_back("syscall mount");
    CHECK(observe_port_scan(w, d) == r.scan);
    CHECK(w.reported == r.scan);
  }
}
