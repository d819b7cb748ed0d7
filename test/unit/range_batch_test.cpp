// Several ranges in one request: the multipart/byteranges answer
// (registry/byteranges.hpp) and the group commit of concurrent misses on one
// blob (lazyfs/range_batcher.hpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "lazyfs/range_batcher.hpp"
#include "registry/byteranges.hpp"

using namespace dsec;
using registry::byte_range;

namespace {

std::string blob_bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = char('a' + (i * 7 + i / 26) % 26);
  return s;
}

std::string part(const std::string& boundary, const std::string& blob, uint64_t a, uint64_t b) {
  return "\r\n--" + boundary + "\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes " +
         std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(blob.size()) +
         "\r\n\r\n" + blob.substr(a, b - a + 1);
}

} // namespace

TEST_CASE("a multipart/byteranges answer gives each range's bytes", "[range_batch]") {
  auto blob = blob_bytes(10000);
  std::vector<byte_range> want{{100, 50}, {4096, 4096}, {9990, 16}};
  CHECK(registry::range_header_value(want) == "bytes=100-149,4096-8191,9990-10005");
  const std::string b = "3d6b6a416f9b5";
  // Go's http.ServeContent: a leading CRLF, parts, the closing delimiter;
  // the last range is short at the blob's end.
  auto body = part(b, blob, 100, 149) + part(b, blob, 4096, 8191) + part(b, blob, 9990, 9999) +
              "\r\n--" + b + "--\r\n";
  auto got = registry::split_byteranges(body, "multipart/byteranges; boundary=" + b, "", want);
  REQUIRE(got);
  REQUIRE(got->size() == 3);
  CHECK((*got)[0] == blob.substr(100, 50));
  CHECK((*got)[1] == blob.substr(4096, 4096));
  CHECK((*got)[2] == blob.substr(9990, 10));
  SECTION("a quoted boundary") {
    auto q = registry::split_byteranges(body, "multipart/byteranges; boundary=\"" + b + "\"", "",
                                        want);
    REQUIRE(q);
    CHECK((*q)[1] == blob.substr(4096, 4096));
  }
  SECTION("one part covering them all (a server that joins ranges)") {
    auto one = registry::split_byteranges(blob.substr(100, 9900), "application/octet-stream",
                                          "bytes 100-9999/10000", want);
    REQUIRE(one);
    CHECK((*one)[0] == blob.substr(100, 50));
    CHECK((*one)[2] == blob.substr(9990, 10));
  }
  SECTION("faults are refused, naming what is wrong") {
    auto lacking = registry::split_byteranges(part(b, blob, 100, 149) + "\r\n--" + b + "--\r\n",
                                              "multipart/byteranges; boundary=" + b, "", want);
    REQUIRE_FALSE(lacking);
    CHECK(lacking.err().code == errc::invalid_argument);
    CHECK(lacking.err().message.find("lacks bytes 4096-8191") != std::string::npos);
    auto cut = registry::split_byteranges(body.substr(0, 300), "multipart/byteranges; boundary=" + b,
                                          "", want);
    REQUIRE_FALSE(cut);
    CHECK(cut.err().message.find("cut short") != std::string::npos);
    auto plain = registry::split_byteranges(blob, "application/octet-stream", "", want);
    REQUIRE_FALSE(plain);
    CHECK(plain.err().message.find("neither multipart") != std::string::npos);
    auto bad = registry::split_byteranges(
      "\r\n--" + b + "\r\nContent-Range: bytes x-2/9\r\n\r\nabc\r\n--" + b + "--\r\n",
      "multipart/byteranges; boundary=" + b, "", want);
    REQUIRE_FALSE(bad);
    CHECK(bad.err().message.find("malformed Content-Range") != std::string::npos);
  }
}

TEST_CASE("ranges that touch or overlap become one union", "[range_batch]") {
  std::vector<size_t> of;
  auto u = lazyfs::union_ranges({{8192, 4096}, {0, 4096}, {4096, 4096}, {20000, 10}, {9000, 100}},
                                of);
  REQUIRE(u.size() == 2);
  CHECK(u[0].offset == 0);
  CHECK(u[0].len == 12288);
  CHECK(u[1].offset == 20000);
  CHECK(u[1].len == 10);
  CHECK(of == std::vector<size_t>{0, 0, 0, 1, 0});
}

namespace {

/// A blob in memory; the first request blocks until released, so that
/// others queue behind it.
struct gated_fetcher : lazyfs::range_fetcher {
  std::string blob;
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, in_first = false;
  std::atomic<int> calls{0};
  std::vector<size_t> ranges_per_call;
  bool fail = false;

  void wait_gate() {
    std::unique_lock<std::mutex> lk{mu};
    if (calls.fetch_add(1) == 0) {
      in_first = true;
      cv.notify_all();
      cv.wait(lk, [&] { return open; });
    }
  }
  expected<std::string> fetch(const registry::blob_source&, uint64_t offset,
                              uint32_t len) override {
    wait_gate();
    {
      std::lock_guard<std::mutex> g{mu};
      ranges_per_call.push_back(1);
    }
    if (fail)
      return unavailable("registry down");
    return blob.substr(offset, len);
  }
  expected<std::vector<std::string>> fetch_ranges(const registry::blob_source&,
                                                  const std::vector<byte_range>& rs) override {
    wait_gate();
    {
      std::lock_guard<std::mutex> g{mu};
      ranges_per_call.push_back(rs.size());
    }
    if (fail)
      return unavailable("registry down");
    std::vector<std::string> out;
    for (auto r : rs)
      out.push_back(blob.substr(r.offset, r.len));
    return out;
  }
};

} // namespace

TEST_CASE("fetches that queue behind a blob's request go out together, as one", "[range_batch]") {
  auto inner = std::make_shared<gated_fetcher>();
  inner->blob = blob_bytes(1 << 20);
  lazyfs::range_batcher batcher{inner, 16, 8u << 20};
  registry::blob_source src, other;
  src.registry = other.registry = "127.0.0.1:5000";
  src.repository = other.repository = "t/lazy";
  src.digest = "sha256:aa";
  other.digest = "sha256:bb";
  bool failing = GENERATE(false, true);
  inner->fail = failing;
  std::vector<uint64_t> offsets{0, 65536, 131072, 135168, 500000};
  std::vector<expected<std::string>> got(offsets.size(), std::string());
  std::vector<std::thread> threads;
  threads.emplace_back([&] { got[0] = batcher.fetch(src, offsets[0], 4096); });
  {
    std::unique_lock<std::mutex> lk{inner->mu};
    inner->cv.wait(lk, [&] { return inner->in_first; });
  }
  // Four more on the same blob while the first is in flight (two of them
  // adjacent), and one on another blob, which does not wait.
  for (size_t i = 1; i < offsets.size(); ++i)
    threads.emplace_back([&, i] { got[i] = batcher.fetch(src, offsets[i], 4096); });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (batcher.queued(src) < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(batcher.queued(src) == 4);
  auto elsewhere = batcher.fetch(other, 8192, 100);
  CHECK(bool(elsewhere) == !failing);
  {
    std::lock_guard<std::mutex> g{inner->mu};
    inner->open = true;
  }
  inner->cv.notify_all();
  for (auto& t : threads)
    t.join();
  // The first alone, the other blob's alone, then the four queued in one
  // request: three ranges, as two of them touch.
  CHECK(batcher.requests() == 3);
  CHECK(batcher.ranges() == 6);
  REQUIRE(inner->ranges_per_call.size() == 3);
  CHECK(inner->ranges_per_call[2] == 3);
  CHECK(batcher.queued(src) == 0);
  for (size_t i = 0; i < offsets.size(); ++i) {
    INFO("fetch " << i);
    if (failing) {
      REQUIRE_FALSE(got[i]);
      CHECK(got[i].err().message == "registry down");
    } else {
      REQUIRE(got[i]);
      CHECK(*got[i] == inner->blob.substr(offsets[i], 4096));
    }
  }
}
