// Unit tests of the swap tier's pure pieces: its record, /proc/crypto names,
// the default file size and the checks of its settings.
#include <catch2/catch.hpp>

#include "sys/swap_tier.hpp"

using namespace dsec::sys;

TEST_CASE("the swap tier record round-trips with its zswap settings and users", "[swap_tier]") {
  swap_tier_record r;
  r.file = "/var/lib/dsec/swap/swapfile";
  r.file_bytes = int64_t{6} << 30;
  r.file_ino = 1234;
  r.zswap = true;
  r.saved = {"N", "lzo", "20"};
  r.set = {"Y", "deflate", "40"};
  r.users = {{"n1", 42, 777}, {"n2", 43, 778}};
  auto back = parse_swap_tier_record(format_swap_tier_record(r));
  REQUIRE(back);
  CHECK(back->file == r.file);
  CHECK(back->file_bytes == r.file_bytes);
  CHECK(back->file_ino == 1234);
  CHECK(back->zswap);
  CHECK(back->saved.enabled == "N");
  CHECK(back->saved.compressor == "lzo");
  CHECK(back->saved.max_pool_percent == "20");
  CHECK(back->set.compressor == "deflate");
  REQUIRE(back->users.size() == 2);
  CHECK(back->users[1].node == "n2");
  CHECK(back->users[1].start_time == 778);
}

TEST_CASE("a swap tier record without a file or complete zswap settings names nothing",
          "[swap_tier]") {
  CHECK_FALSE(parse_swap_tier_record(""));
  CHECK_FALSE(parse_swap_tier_record("user n1 1 2\n"));
  // A relative path or one climbing out is never taken for our file.
  CHECK_FALSE(parse_swap_tier_record("file swapfile\n"));
  CHECK_FALSE(parse_swap_tier_record("file /var/../etc/x\n"));
  // zswap settings the last node could not put back are not ours to keep.
  CHECK_FALSE(parse_swap_tier_record("zswap 1\nsaved.enabled N\nset.enabled Y\n"));
  auto zswap_only = parse_swap_tier_record(
    "zswap 1\nsaved.enabled N\nsaved.compressor lzo\nsaved.max_pool_percent 20\n"
    "set.enabled Y\nset.compressor deflate\nset.max_pool_percent 40\n");
  REQUIRE(zswap_only);
  CHECK(zswap_only->file.empty());
  CHECK(zswap_only->zswap);
}

TEST_CASE("parse_crypto_names lists each algorithm once", "[swap_tier]") {
  auto names = parse_crypto_names("name         : lzo-rle\ndriver       : lzo-rle-scomp\n"
                                  "type         : scomp\n\nname         : deflate\n"
                                  "driver       : deflate-generic\n\nname         : deflate\n");
  CHECK(names == std::vector<std::string>{"lzo-rle", "deflate"});
  CHECK(parse_crypto_names("").empty());
}

TEST_CASE("--zswap-compressor takes zswap's names or off; the kernel must have it",
          "[swap_tier]") {
  for (auto ok : {"deflate", "lzo", "lzo-rle", "lz4", "zstd", "off"})
    CHECK(parse_zswap_compressor(ok));
  auto bad = parse_zswap_compressor("gzip");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("gzip") != std::string::npos);
  CHECK(bad.err().message.find("deflate") != std::string::npos);
  const char* crypto = "name : deflate\nname : lzo\nname : lzo-rle\nname : sha256\n";
  CHECK(zswap_compressor_available("deflate", crypto));
  auto missing = zswap_compressor_available("zstd", crypto);
  REQUIRE_FALSE(missing);
  CHECK(missing.err().message.find("no zstd") != std::string::npos);
  CHECK(missing.err().message.find("deflate, lzo, lzo-rle") != std::string::npos);
  CHECK(missing.err().message.find("sha256") == std::string::npos);
}

TEST_CASE("default_swap_file_mb: a quarter of RAM, a tenth of free disk, 16 GiB at most",
          "[swap_tier]") {
  struct row {
    int64_t ram_mb, free_mb, want;
  };
  for (auto r : {row{24576, 81920, 6144},     // this machine: RAM bounds it
                 row{24576, 20480, 2048},     // a full disk bounds it
                 row{262144, 1 << 22, 16384}, // big host: the cap
                 row{2048, 81920, 512},
                 row{512, 81920, 0},          // under 256 MiB: no file
                 row{24576, 1024, 0}})
    CHECK(default_swap_file_mb(r.ram_mb << 20, r.free_mb << 20) == r.want);
}

TEST_CASE("a swap file must leave 1 GiB free; the zswap pool share is 1..90", "[swap_tier]") {
  CHECK(check_swap_file_mb(0, int64_t{2} << 30, "/x"));
  CHECK(check_swap_file_mb(1024, int64_t{2} << 30, "/x"));
  auto big = check_swap_file_mb(1025, int64_t{2} << 30, "/x");
  REQUIRE_FALSE(big);
  CHECK(big.err().message.find("/x has 2048 MiB free") != std::string::npos);
  CHECK_FALSE(check_swap_file_mb(-1, int64_t{2} << 30, "/x"));
  CHECK(check_zswap_pool_percent(1));
  CHECK(check_zswap_pool_percent(90));
  CHECK_FALSE(check_zswap_pool_percent(0));
  CHECK_FALSE(check_zswap_pool_percent(91));
}
