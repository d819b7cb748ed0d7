// Unit tests of the sandbox volume's growth rule (sys/quota_volume.hpp): when
// it grows, by how much, and that it never takes the host's last space.
#include <catch2/catch.hpp>

#include "sys/quota_volume.hpp"

using dsec::sys::quota_volume;

namespace {
constexpr uint64_t MiB = uint64_t{1} << 20, GiB = uint64_t{1} << 30;
}

TEST_CASE("a new sandbox volume starts at 2 GiB, or its whole maximum if smaller", "[quota]") {
  CHECK(quota_volume::initial_bytes(64 * GiB) == 2 * GiB);
  CHECK(quota_volume::initial_bytes(500 * MiB) == 500 * MiB);
}

TEST_CASE("the volume grows when a quarter of it is left, or 1 GiB, whichever is more",
          "[quota]") {
  CHECK(quota_volume::low_water(2 * GiB) == GiB);
  CHECK(quota_volume::low_water(16 * GiB) == 4 * GiB);
}

TEST_CASE("growth takes half the size, at least 1 GiB, within the maximum", "[quota]") {
  CHECK(quota_volume::growth_step(2 * GiB, 64 * GiB, 100 * GiB, 256 * MiB) == GiB);
  CHECK(quota_volume::growth_step(8 * GiB, 64 * GiB, 100 * GiB, 256 * MiB) == 4 * GiB);
  CHECK(quota_volume::growth_step(63 * GiB, 64 * GiB, 100 * GiB, 256 * MiB) == GiB);
  CHECK(quota_volume::growth_step(64 * GiB, 64 * GiB, 100 * GiB, 256 * MiB) == 0);
  CHECK(quota_volume::growth_step(65 * GiB, 64 * GiB, 100 * GiB, 256 * MiB) == 0);
}

TEST_CASE("growth leaves the host what the node keeps for itself, or does not happen",
          "[quota]") {
  // 700 MiB free, 256 kept: 444 MiB may go to the volume.
  CHECK(quota_volume::growth_step(2 * GiB, 64 * GiB, 700 * MiB, 256 * MiB) == 444 * MiB);
  // A full host: nothing; a host with less than 64 MiB to spare: nothing.
  CHECK(quota_volume::growth_step(2 * GiB, 64 * GiB, 0, 256 * MiB) == 0);
  CHECK(quota_volume::growth_step(2 * GiB, 64 * GiB, 300 * MiB, 256 * MiB) == 0);
  // Steps are whole MiB (the loop device counts sectors).
  CHECK(quota_volume::growth_step(2 * GiB, 2 * GiB + 100 * MiB + 4095, 100 * GiB, 0)
        == 100 * MiB);
}
