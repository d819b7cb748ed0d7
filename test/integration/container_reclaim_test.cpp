// The container side of reclaim (backends/container/container_reclaim.cpp):
// usage() reads what the sandbox's cgroup counts (RAM, swap, CPU time), and
// reclaim() pushes a running, idle sandbox's memory into the node's zram
// swap, returning what left RAM, without stopping it. Root; the reclaim
// test makes a zram swap of its own through sys::zram_swap (or uses the
// host's swap) and removes it after.
#include "container_fixture.hpp"

#include "sys/zram.hpp"

namespace {

constexpr int64_t mib = 1 << 20;

// 24 MiB of random bytes as base64 (32 MiB) in a shell variable: anonymous
// heap the sandbox's sh holds while it sleeps.
const char* holder = "x=$(head -c 25165824 /dev/urandom | base64); echo held > /tmp/held; "
                     "while :; do sleep 1000; done"; // a loop: ash would exec a last sleep

void start_holder(backends::sandbox& sb) {
  run_sh(sb, std::string{"("} + holder + ") >/dev/null 2>&1 &");
  for (int i = 0; i < 300 && run_sh(sb, "cat /tmp/held 2>/dev/null").stdout_data != "held\n"; ++i)
    std::this_thread::sleep_for(milliseconds(100));
  REQUIRE(run_sh(sb, "cat /tmp/held").stdout_data == "held\n");
}

// Destroys the sandbox however the test ends (a failed REQUIRE throws).
struct destroy_at_exit {
  std::shared_ptr<backends::sandbox> sb;
  ~destroy_at_exit() { (void)sb->destroy(); }
};

} // namespace

TEST_CASE("container: usage() counts RAM, tmpfs and CPU time of the sandbox", "[container][reclaim]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.memory_mb = 256;
  auto sb = make(spec);
  destroy_at_exit guard{sb};
  auto u0 = sb->usage();
  REQUIRE(u0);
  run_sh(*sb, "dd if=/dev/urandom of=/dev/shm/f bs=1M count=32 2>/dev/null; "
              "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done");
  auto u1 = sb->usage();
  REQUIRE(u1);
  CHECK(u1->resident_bytes >= u0->resident_bytes + 30 * mib); // the tmpfs file is its memory
  CHECK(u1->resident_bytes < 256 * mib);
  CHECK(u1->cpu_ns > u0->cpu_ns);
  CHECK(u1->swap_bytes >= 0);
  REQUIRE(sb->destroy());
  auto gone = sb->usage();
  CHECK_FALSE(gone);
}

TEST_CASE("container: reclaim() moves an idle sandbox's heap to swap and it runs on",
          "[container][reclaim]") {
  if (!is_root())
    return;
  sys::zram_options zo;
  zo.size_mb = 256;
  zo.node = node_id;
  auto zram = sys::zram_swap::attach(zo);
  struct detach_at_exit {
    std::shared_ptr<sys::zram_swap> z;
    ~detach_at_exit() { (void)z->detach(); } // never leave a swap of ours behind
  } guard{zram};
  auto swaps = sys::read_file("/proc/swaps");
  if (!swaps || sys::parse_proc_swaps(*swaps).empty()) {
    WARN("skipped: no swap on this host and no zram to make one: " << zram->describe());
    return;
  }
  sandbox_spec spec;
  spec.memory_mb = 256;
  auto sb = make(spec);
  destroy_at_exit sb_guard{sb};
  start_holder(*sb);
  auto before = sb->usage();
  REQUIRE(before);
  REQUIRE(before->resident_bytes >= 30 * mib);
  auto freed = sb->reclaim();
  REQUIRE(freed);
  auto after = sb->usage();
  REQUIRE(after);
  INFO("resident " << before->resident_bytes / mib << " -> " << after->resident_bytes / mib
                   << " MiB, swap " << after->swap_bytes / mib << " MiB, freed " << *freed / mib);
  CHECK(*freed >= 24 * mib);
  CHECK(after->swap_bytes >= 24 * mib);
  CHECK(before->resident_bytes - after->resident_bytes == *freed);
  // Not stopped: it answers, and the holder still sleeps.
  CHECK(run_sh(*sb, "echo alive").stdout_data == "alive\n");
  CHECK(run_sh(*sb, "ps | grep -c '[s]leep 1000'").stdout_data != "0\n");
  REQUIRE(sb->destroy());
  CHECK_FALSE(sb->reclaim());
}

TEST_CASE("cgroup: the RAM+swap limit follows the memory limit up and down",
          "[cgroup][reclaim]") {
  if (!is_root())
    return;
  if (!sys::exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")) {
    WARN("skipped: this kernel does not account swap (no memory.memsw.*)");
    return;
  }
  auto rel = "dsec/" + node_id + "/memsw";
  auto cg = sys::create_cgroup_v1("/sys/fs/cgroup", rel);
  REQUIRE(cg);
  auto dir = "/sys/fs/cgroup/memory/" + rel;
  auto read = [&](const char* knob) { return std::stoll(*sys::read_file(dir + "/" + knob)); };
  // Lowering from unlimited (limit first), raising (memsw first), lowering.
  for (int64_t mb : {256, 512, 128}) {
    INFO(mb << " MiB");
    REQUIRE((*cg)->apply({0, mb * mib, 0}));
    CHECK(read("memory.limit_in_bytes") == mb * mib);
    CHECK(read("memory.memsw.limit_in_bytes") == mb * mib);
  }
  REQUIRE((*cg)->remove());
}
