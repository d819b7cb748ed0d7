// Unit tests of the pure pieces of the node's zram swap: mm_stat and
// /proc/swaps parsing, the default size, the swap header layout and the
// machine-wide record's text form.
#include <catch2/catch.hpp>

#include <cstring>

#include "sys/zram.hpp"

using namespace dsec::sys;

TEST_CASE("parse_mm_stat reads the counters a node reports", "[zram]") {
  auto s = parse_mm_stat("  4096  64  20480  0  85622784  1  2  3\n");
  REQUIRE(s);
  CHECK(s->orig_data_size == 4096);
  CHECK(s->compr_data_size == 64);
  CHECK(s->mem_used_total == 20480);
  CHECK(s->mem_used_max == 85622784);
  CHECK(s->huge_pages == 3);
  // Older kernels print fewer fields: the first three are enough.
  auto old = parse_mm_stat("10 5 8");
  REQUIRE(old);
  CHECK(old->mem_used_total == 8);
  CHECK_FALSE(parse_mm_stat(""));
  CHECK_FALSE(parse_mm_stat("12 x"));
}

TEST_CASE("parse_proc_swaps lists active swaps, none on an empty table", "[zram]") {
  CHECK(parse_proc_swaps("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").empty());
  CHECK(parse_proc_swaps("").empty());
  auto v = parse_proc_swaps("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                            "/dev/zram1                              partition\t2097148\t\t12\t\t100\n"
                            "/swapfile                               file\t\t1024\t\t0\t\t-2\n");
  REQUIRE(v.size() == 2);
  CHECK(v[0].path == "/dev/zram1");
  CHECK(v[0].size_kb == 2097148);
  CHECK(v[0].used_kb == 12);
  CHECK(v[0].priority == 100);
  CHECK(v[1].path == "/swapfile");
  CHECK(v[1].priority == -2);
}

TEST_CASE("default_zram_mb is a quarter of RAM between 64 MiB and 8 GiB", "[zram]") {
  struct row { int64_t ram_mb, want; };
  const row rows[] = {{24 * 1024, 6 * 1024}, {4096, 1024}, {128, 64}, {0, 64},
                      {256 * 1024, 8192}, {32 * 1024, 8192}};
  for (auto& r : rows) {
    INFO(r.ram_mb);
    CHECK(default_zram_mb(r.ram_mb << 20) == r.want);
  }
}

TEST_CASE("make_swap_header lays out a v1 swap header the kernel reads", "[zram]") {
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i)
    uuid[i] = static_cast<unsigned char>(i + 1);
  auto page = make_swap_header(int64_t{1} << 30, 4096, uuid, "dsec-zram");
  REQUIRE(page.size() == 4096);
  CHECK(page.compare(4096 - 10, 10, "SWAPSPACE2") == 0);
  uint32_t version = 0, last_page = 0, bad = 7;
  std::memcpy(&version, &page[1024], 4);
  std::memcpy(&last_page, &page[1028], 4);
  std::memcpy(&bad, &page[1032], 4);
  CHECK(version == 1);
  CHECK(last_page == (uint32_t{1} << 18) - 1);
  CHECK(bad == 0);
  CHECK(std::memcmp(&page[1036], uuid, 16) == 0);
  CHECK(page.compare(1052, 9, "dsec-zram") == 0);
  CHECK(page[0] == '\0'); // boot block left empty
}

TEST_CASE("the zram record round-trips and only ever names a zram device", "[zram]") {
  zram_record r;
  r.device = "zram12";
  r.diskseq = 41;
  r.disksize = 6442450944;
  r.users = {{"node-a", 123, 456}, {"node-b", 789, 1011}};
  auto back = parse_zram_record(format_zram_record(r));
  REQUIRE(back);
  CHECK(back->device == "zram12");
  CHECK(back->diskseq == 41);
  CHECK(back->disksize == 6442450944);
  REQUIRE(back->users.size() == 2);
  CHECK(back->users[1].node == "node-b");
  CHECK(back->users[1].pid == 789);
  CHECK(back->users[1].start_time == 1011);
  for (auto bad : {"", "device sda\n", "device zram\n", "device zram1x\n", "device ../zram1\n",
                   "diskseq 4\n"}) {
    INFO(bad);
    CHECK_FALSE(parse_zram_record(bad));
  }
}
