// Reclaim and memory admission policy: idle detection, what to squeeze first,
// admission maths. Table-driven, no actors, no clock.
#include <catch2/catch.hpp>

#include <set>

#include "policy/reclaim_policy.hpp"

using namespace dsec;
using namespace dsec::reclaim;

namespace {

usage_sample at(int64_t cpu_ms, int64_t resident_mb, int64_t swap_mb = 0) {
  usage_sample s;
  s.cpu_ns = cpu_ms * 1000000;
  s.resident_bytes = resident_mb << 20;
  s.swap_bytes = swap_mb << 20;
  return s;
}

tunables tun_ms(int64_t idle_ms) {
  tunables t;
  t.idle_ms = idle_ms;
  return t;
}

host_memory host(int64_t total, int64_t avail, int64_t swap = 0) {
  host_memory h;
  h.known = true;
  h.total_mb = total;
  h.available_mb = avail;
  h.swap_total_mb = swap;
  h.swap_free_mb = swap;
  return h;
}

} // namespace

TEST_CASE("idle: no CPU growth for the threshold makes a sandbox idle", "[reclaim]") {
  auto tun = tun_ms(3000);
  tracked t;
  observe(t, at(100, 50), 1000, tun);
  CHECK_FALSE(is_idle(t, 1000, tun)); // one sample says nothing
  CHECK(t.idle_since_ms == 0);
  observe(t, at(100, 50), 2000, tun);
  CHECK(t.idle_since_ms == 1000); // quiet since the previous sample
  CHECK_FALSE(is_idle(t, 2000, tun));
  observe(t, at(105, 50), 4000, tun); // 5 ms in 2 s: below 2% of a core
  CHECK(is_idle(t, 4000, tun));
  CHECK(wants_reclaim(t, 4000, tun));
  observe(t, at(600, 50), 5000, tun); // half a core: busy again
  CHECK(t.idle_since_ms == 0);
  CHECK_FALSE(is_idle(t, 5000, tun));
}

TEST_CASE("idle: a reclaimed sandbox is not squeezed again unless it grew or woke",
          "[reclaim]") {
  auto tun = tun_ms(1000);
  tracked t; // times are unix ms: never 0
  observe(t, at(0, 100), 1000, tun);
  observe(t, at(0, 100), 1500, tun);
  observe(t, at(0, 100), 2000, tun);
  REQUIRE(wants_reclaim(t, 2000, tun));
  record_reclaim(t, 80 << 20);
  CHECK(t.reclaimed_bytes == (80 << 20));
  CHECK(t.resident_bytes == (20 << 20));
  observe(t, at(0, 20, 80), 3000, tun);
  CHECK_FALSE(wants_reclaim(t, 3000, tun)); // still idle, already squeezed
  observe(t, at(0, 25, 75), 4000, tun);
  CHECK_FALSE(wants_reclaim(t, 4000, tun)); // grew by 5 MiB: under regrow_bytes
  observe(t, at(0, 40, 60), 5000, tun);
  CHECK(wants_reclaim(t, 5000, tun)); // grew by 20 MiB while idle
  record_reclaim(t, 20 << 20);
  CHECK(t.reclaimed_bytes == (100 << 20));
  observe(t, at(900, 60), 6000, tun); // woke up
  observe(t, at(900, 60), 7000, tun);
  observe(t, at(900, 60), 8000, tun);
  CHECK(wants_reclaim(t, 8000, tun)); // a new idle stretch
}

TEST_CASE("pick: largest first, then longest idle, at most max", "[reclaim]") {
  auto tun = tun_ms(1000);
  std::map<std::string, tracked> all;
  auto idle = [&](const std::string& id, int64_t since, int64_t mb) {
    tracked t;
    observe(t, at(0, mb), since, tun);
    observe(t, at(0, mb), since + 500, tun);
    all[id] = t;
  };
  idle("small-old", 100, 10);
  idle("big", 1000, 300);
  idle("mid-new", 2000, 100);
  idle("mid-old", 500, 100);
  idle("too-fresh", 9500, 900); // idle for 500 ms at 10000: not yet
  tracked busy;
  observe(busy, at(0, 500), 8000, tun);
  observe(busy, at(800, 500), 9000, tun);
  all["busy"] = busy;
  auto order = pick(all, 10000, tun, 3);
  CHECK(order == std::vector<std::string>{"big", "mid-old", "mid-new"});
  CHECK(pick(all, 10000, tun, 10).size() == 4);
  CHECK(reclaimable_bytes(all, 10000, tun) == (510ll << 20));
}

TEST_CASE("meminfo: total, available and swap in MiB", "[reclaim]") {
  auto h = parse_meminfo("MemTotal:       24576000 kB\nMemFree:         1000000 kB\n"
                         "MemAvailable:   20480000 kB\nSwapTotal:       2097152 kB\n"
                         "SwapFree:        1048576 kB\n");
  CHECK(h.known);
  CHECK(h.total_mb == 24000);
  CHECK(h.available_mb == 20000);
  CHECK(h.swap_total_mb == 2048);
  CHECK(h.swap_free_mb == 1024);
  CHECK_FALSE(parse_meminfo("MemTotal: 100 kB\n").known);
  CHECK_FALSE(parse_meminfo("garbage").known);
}

TEST_CASE("need: the measured mean, at least the floor, never past the limit", "[reclaim]") {
  CHECK(expected_need_mb(512, 0) == need_floor_mb);
  CHECK(expected_need_mb(512, 200) == 200);
  CHECK(expected_need_mb(128, 200) == 128);
  CHECK(expected_need_mb(16, 0) == 16);
}

TEST_CASE("admission: fits, reclaim first, refuse", "[reclaim]") {
  admission_limits lim;
  lim.headroom_mb = 512;
  lim.overcommit = 4;
  struct row {
    const char* what;
    int64_t avail, reserved;
    bool tried;
    verdict want;
  };
  const row rows[] = {
    {"plenty", 8000, 0, false, verdict::admit},
    {"exactly need + headroom", 512 + 32, 0, false, verdict::admit},
    {"one MiB short: reclaim and sample first", 512 + 31, 0, false, verdict::reclaim_first},
    {"one MiB short after reclaim", 512 + 31, 0, true, verdict::refuse_memory},
    {"fits after reclaim", 800, 0, true, verdict::admit},
    {"a burst since the sample used it up", 1000, 500, false, verdict::reclaim_first},
    {"... and still after reclaim", 1000, 500, true, verdict::refuse_memory},
  };
  for (auto& r : rows) {
    INFO(r.what);
    admission_input in;
    in.host = host(16000, r.avail);
    in.reserved_mb = r.reserved;
    in.memory_mb = 512;
    in.need_mb = 32;
    in.reclaim_tried = r.tried;
    auto a = decide(in, lim);
    CHECK(a.v == r.want);
    CHECK(a.available_mb == r.avail - r.reserved);
  }
}

TEST_CASE("admission: the overcommit cap bounds the sum of limits", "[reclaim]") {
  admission_limits lim;
  lim.headroom_mb = 0;
  lim.overcommit = 4;
  admission_input in;
  in.host = host(1000, 900, 500); // cap: 4 x (1000 + 500) = 6000 MiB
  in.memory_mb = 512;
  in.need_mb = 32;
  in.committed_mb = 6000 - 512;
  CHECK(decide(in, lim).v == verdict::admit);
  in.committed_mb += 1;
  auto a = decide(in, lim);
  CHECK(a.v == verdict::refuse_overcommit);
  CHECK(a.cap_mb == 6000);
  CHECK_THAT(refusal_message("n1", in, lim, a), Catch::Contains("overcommit")
                                                   && Catch::Contains("memory"));
  lim.overcommit = 0; // no cap
  CHECK(decide(in, lim).v == verdict::admit);
}

TEST_CASE("admission: nothing measured yet samples first, then admits", "[reclaim]") {
  admission_limits lim;
  admission_input in;
  in.memory_mb = 512;
  in.need_mb = 32;
  CHECK(decide(in, lim).v == verdict::reclaim_first);
  in.reclaim_tried = true;
  CHECK(decide(in, lim).v == verdict::admit);
}

TEST_CASE("admission: the refusal names node, memory, need and headroom", "[reclaim]") {
  admission_limits lim;
  lim.headroom_mb = 1000;
  admission_input in;
  in.host = host(16000, 700);
  in.memory_mb = 512;
  in.need_mb = 32;
  in.reclaim_tried = true;
  auto a = decide(in, lim);
  REQUIRE(a.v == verdict::refuse_memory);
  in.reclaim_tried = false; // (the message names the reclaim when there was one)
  auto msg = refusal_message("n1", in, lim, a);
  CHECK(msg == "create: node n1 has 700 MiB of memory available, needs 32 MiB plus 1000 MiB "
               "headroom; retry later or elsewhere");
  CHECK(free_for_sandboxes_mb(in.host, 0, lim) == 0);
  CHECK(free_for_sandboxes_mb(host(16000, 5000), 1000, lim) == 3000);
}

TEST_CASE("pick_samples: all up to the cap, else the least recently measured, all come round",
          "[reclaim]") {
  tunables tun;
  tun.max_samples_per_pass = 3;
  std::map<std::string, tracked> running;
  for (auto id : {"a", "b", "c"})
    running[id] = tracked{};
  // Up to the cap: everyone, every pass.
  CHECK(pick_samples(running, tun) == std::vector<std::string>{"a", "b", "c"});
  // Past it: never measured first, then the oldest sample.
  running["a"].last_cpu_ns = 1, running["a"].last_sample_ms = 300;
  running["b"].last_cpu_ns = 1, running["b"].last_sample_ms = 100;
  running["c"].last_cpu_ns = 1, running["c"].last_sample_ms = 200;
  running["d"] = tracked{};
  running["e"].last_cpu_ns = 1, running["e"].last_sample_ms = 100;
  CHECK(pick_samples(running, tun) == std::vector<std::string>{"d", "b", "e"});
  // Passes in a row measure every sandbox within ceil(N / cap) passes.
  std::set<std::string> seen;
  for (int64_t now = 1000; now < 1002; ++now)
    for (auto& id : pick_samples(running, tun)) {
      seen.insert(id);
      observe(running[id], at(1, 1), now, tun);
    }
  CHECK(seen.size() == running.size());
}
