// The lazy blob daemon's chunk cache (lazyfs/chunk_cache.hpp) and the read
// path of its file system (lazyfs/blob_fs.hpp) with a fake fetcher: hits and
// misses, verification by length and chunk digest, bounded retries, LRU
// eviction under the budget, one fetch for concurrent readers, a reopened
// cache, and reads that cross chunk boundaries and the blob's end.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "layers/digest.hpp"
#include "lazyfs/blob_fs.hpp"
#include "lazyfs/chunk_cache.hpp"
#include "lazyfs/daemon.hpp"
#include "lazyfs/stats.hpp"
#include "registry/chunk_list.hpp"
#include "registry/lazy_source.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using namespace std::chrono_literals;

namespace {

const std::string blob_a(64, 'a');

lazyfs::retry_policy quick_retries() {
  lazyfs::retry_policy p;
  p.attempts = 3;
  p.backoff = {1ms, 2ms};
  p.deadline = 2000ms;
  p.failure_hold = 0ms;
  return p;
}

/// The sparse file that holds blob `blob`'s chunks of 64 KiB.
std::string blob_file(const test::temp_dir& dir, const std::string& blob) {
  return dir.path + "/cache/blobs/" + blob + "-65536";
}

/// A chunk request whose fetch answers `data` and counts its calls.
lazyfs::chunk_request request(const std::string& blob, uint64_t index, const std::string& data,
                              std::atomic<int>& calls, uint32_t chunk_size = 65536) {
  lazyfs::chunk_request r;
  r.blob = blob;
  r.index = index;
  r.length = uint32_t(data.size());
  r.chunk_size = chunk_size;
  r.fetch = [&calls, data]() -> expected<std::string> {
    calls++;
    return data;
  };
  return r;
}

std::string read_all(lazyfs::chunk_cache& c, const lazyfs::chunk_request& r) {
  std::string out(r.length, '\0');
  auto n = c.read(r, 0, r.length, out.data());
  REQUIRE(n);
  CHECK(*n == r.length);
  return out;
}

} // namespace

TEST_CASE("a missing chunk is fetched once, then served from disk", "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  auto r = request(blob_a, 3, std::string(4096, 'x') + "tail", calls);
  CHECK(read_all(**c, r) == std::string(4096, 'x') + "tail");
  std::string part(4, '\0');
  REQUIRE((*c)->read(r, 4096, 4, part.data()));
  CHECK(part == "tail");
  CHECK(calls == 1);
  auto k = (*c)->counters();
  CHECK(k.misses == 1);
  CHECK(k.hits == 1);
  CHECK(k.chunks_fetched == 1);
  CHECK(k.bytes_fetched == 4100);
  CHECK(k.cache_bytes == 4100);
  CHECK(sys::exists(blob_file(dir, blob_a)));
  // A read past the chunk is refused, not served from neighbouring memory.
  CHECK((*c)->read(r, 4097, 4, part.data()).err().code == errc::invalid_argument);
}

TEST_CASE("a chunk of the wrong length or digest is refused and never stored",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  auto short_one = request(blob_a, 0, "abc", calls);
  short_one.length = 8; // the blob says 8 bytes; the range answered 3
  std::string out(8, '\0');
  auto n = (*c)->read(short_one, 0, 8, out.data());
  REQUIRE_FALSE(n);
  CHECK(n.err().message.find("answered 3 bytes, the chunk has 8") != std::string::npos);
  CHECK(calls == 3); // every attempt
  auto bad_digest = request(blob_a, 1, "12345678", calls);
  bad_digest.sha256 = layers::digest_hex(layers::sha256_string("87654321"));
  REQUIRE_FALSE((*c)->read(bad_digest, 0, 8, out.data()));
  auto good_digest = request(blob_a, 2, "12345678", calls);
  good_digest.sha256 = layers::digest_hex(layers::sha256_string("12345678"));
  REQUIRE((*c)->read(good_digest, 0, 8, out.data()));
  auto k = (*c)->counters();
  CHECK(k.read_errors == 2);
  CHECK(k.verify_failures == 6);
  CHECK(k.cache_chunks == 1);
  CHECK_FALSE((*c)->holds(blob_a, 0));
  CHECK_FALSE((*c)->holds(blob_a, 1));
}

TEST_CASE("a failing fetch is retried with backoff, then the read fails in bounded time",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  lazyfs::chunk_request flaky;
  flaky.blob = blob_a;
  flaky.length = 4;
  flaky.chunk_size = 4;
  flaky.fetch = [&]() -> expected<std::string> {
    if (++calls < 3)
      return unavailable("registry 127.0.0.1:1: connection refused");
    return std::string{"data"};
  };
  std::string out(4, '\0');
  REQUIRE((*c)->read(flaky, 0, 4, out.data()));
  CHECK(out == "data");
  CHECK(calls == 3);

  lazyfs::retry_policy slow = quick_retries();
  slow.backoff = {300ms};
  slow.deadline = 400ms; // the second backoff would pass it: no third attempt
  slow.failure_hold = 5000ms;
  auto d = lazyfs::chunk_cache::open(dir.path + "/cache2", 1 << 20, slow);
  REQUIRE(d);
  calls = 0;
  lazyfs::chunk_request dead = flaky;
  dead.index = 9;
  dead.fetch = [&]() -> expected<std::string> {
    ++calls;
    return unavailable("registry 127.0.0.1:1: connection refused");
  };
  auto t0 = std::chrono::steady_clock::now();
  auto n = (*d)->read(dead, 0, 4, out.data());
  auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(n);
  CHECK(n.err().code == errc::unavailable);
  CHECK(n.err().message.find("connection refused") != std::string::npos);
  CHECK(calls == 2);
  CHECK(took < 1000ms);
  CHECK((*d)->counters().read_errors == 1);
  // The kernel asks again at once: the failure is answered without waiting.
  t0 = std::chrono::steady_clock::now();
  REQUIRE_FALSE((*d)->read(dead, 0, 4, out.data()));
  CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
  CHECK(calls == 2);
  CHECK((*d)->counters().read_errors == 2);
}

TEST_CASE("the cache stays under its budget, evicting the least recently used",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 2 * 1000, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  auto a = request(blob_a, 0, std::string(1000, 'a'), calls);
  auto b = request(blob_a, 1, std::string(1000, 'b'), calls);
  auto x = request(blob_a, 2, std::string(1000, 'x'), calls);
  read_all(**c, a);
  read_all(**c, b);
  read_all(**c, a); // a is now the most recently used
  read_all(**c, x); // b goes
  auto k = (*c)->counters();
  CHECK(k.evictions == 1);
  CHECK(k.cache_bytes == 2000);
  CHECK((*c)->holds(blob_a, 0));
  CHECK_FALSE((*c)->holds(blob_a, 1));
  calls = 0;
  read_all(**c, a);
  CHECK(calls == 0);
  read_all(**c, b);
  CHECK(calls == 1);
}

TEST_CASE("concurrent reads of one missing chunk share one fetch", "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  lazyfs::chunk_request r;
  r.blob = blob_a;
  r.index = 5;
  r.length = 65536;
  r.chunk_size = 65536;
  r.fetch = [&]() -> expected<std::string> {
    ++calls;
    std::this_thread::sleep_for(100ms);
    return std::string(65536, 'z');
  };
  std::vector<std::thread> readers;
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i)
    readers.emplace_back([&] {
      std::string out(16, '\0');
      if (auto n = (*c)->read(r, 100, 16, out.data()); n && out == std::string(16, 'z'))
        ++right;
    });
  for (auto& t : readers)
    t.join();
  CHECK(right == 8);
  CHECK(calls == 1);
  CHECK((*c)->counters().chunks_fetched == 1);
}

TEST_CASE("a stretch of missing chunks is one range request; a bad chunk is fetched alone",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  std::vector<std::string> data;
  for (char ch : std::string("pqrstu"))
    data.push_back(std::string(4096, ch));
  std::atomic<int> single{0};
  std::vector<lazyfs::chunk_request> run;
  for (uint64_t i = 0; i < data.size(); ++i) {
    run.push_back(request(blob_a, i, data[i], single, 4096));
    run.back().sha256 = layers::digest_hex(layers::sha256_string(data[i]));
  }
  read_all(**c, run[2]); // cached already: splits the run in two stretches
  REQUIRE(single == 1);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  (*c)->fetch_missing(run, [&](const lazyfs::chunk_request& first, uint64_t length) {
    ranges.emplace_back(first.index, length);
    std::string out;
    for (uint64_t i = first.index; out.size() < length; ++i)
      out += i == 4 ? std::string(4096, 'X') : data[i]; // chunk 4 arrives damaged
    return expected<std::string>{out};
  });
  CHECK(ranges == std::vector<std::pair<uint64_t, uint64_t>>{{0, 8192}, {3, 12288}});
  CHECK(single == 2); // chunk 4 again, on its own
  auto n = (*c)->counters();
  CHECK(n.chunks_fetched == 6);
  CHECK(n.verify_failures == 1);
  CHECK(n.range_requests == 4);
  for (uint64_t i = 0; i < data.size(); ++i)
    CHECK(read_all(**c, run[i]) == data[i]);
  CHECK(single == 2); // all served from the cache
}

TEST_CASE("a reopened cache keeps its chunks, refetches torn or damaged ones, and sweeps "
          "what older nodes left",
          "[chunk_cache]") {
  test::temp_dir dir;
  std::atomic<int> calls{0};
  const std::string blob_b(64, 'b');
  auto r = request(blob_a, 7, std::string(65536, 'p'), calls);
  auto torn = request(blob_a, 9, std::string(65536, 't'), calls);
  auto damaged = request(blob_b, 2, std::string(4096, 'd'), calls);
  damaged.sha256 = layers::digest_hex(layers::sha256_string(std::string(4096, 'd')));
  {
    auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
    REQUIRE(c);
    read_all(**c, r);
    read_all(**c, torn);
    read_all(**c, damaged);
    CHECK(calls == 3);
  }
  // A crash cut chunk 9's write short: a hole inside it. Chunk 2 of b has
  // lost its bytes. An older node's chunk files and temp files are there.
  {
    sys::unique_fd fd{::open(blob_file(dir, blob_a).c_str(), O_RDWR)};
    REQUIRE(fd);
    REQUIRE(::fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 9 * 65536 + 16384,
                        4096) == 0);
    sys::unique_fd fb{::open(blob_file(dir, blob_b).c_str(), O_RDWR)};
    REQUIRE(fb);
    REQUIRE(::pwrite(fb.get(), "XXXX", 4, 2 * 65536 + 100) == 4);
  }
  REQUIRE(sys::make_dirs(dir.path + "/cache/chunks/" + blob_a));
  REQUIRE(sys::write_file_atomic(dir.path + "/cache/chunks/" + blob_a + "/7", "old"));
  REQUIRE(sys::make_dirs(dir.path + "/cache/tmp"));
  REQUIRE(sys::write_file_atomic(dir.path + "/cache/tmp/half-written", "xx"));
  REQUIRE(sys::write_file_atomic(dir.path + "/cache/blobs/not-a-digest", "xx"));
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(c);
  CHECK((*c)->counters().cache_bytes == 65536 + 4096);
  CHECK((*c)->holds(blob_a, 7));
  CHECK_FALSE((*c)->holds(blob_a, 9));
  CHECK((*c)->holds(blob_b, 2));
  CHECK_FALSE(sys::exists(dir.path + "/cache/chunks"));
  CHECK_FALSE(sys::exists(dir.path + "/cache/tmp"));
  CHECK_FALSE(sys::exists(dir.path + "/cache/blobs/not-a-digest"));
  calls = 0;
  CHECK(read_all(**c, r) == std::string(65536, 'p'));
  CHECK(calls == 0);
  CHECK(read_all(**c, torn) == std::string(65536, 't'));
  CHECK(calls == 1);
  // Its digest does not match: dropped and fetched again, at its first read.
  CHECK(read_all(**c, damaged) == std::string(4096, 'd'));
  CHECK(calls == 2);
  CHECK(read_all(**c, damaged) == std::string(4096, 'd'));
  CHECK(calls == 2);
}

TEST_CASE("an evicted chunk's blocks are freed, and a blob's file goes with its last chunk",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto c = lazyfs::chunk_cache::open(dir.path + "/cache", 3 * 65536, quick_retries());
  REQUIRE(c);
  std::atomic<int> calls{0};
  const std::string blob_b(64, 'b');
  auto blocks = [&](const std::string& blob) {
    struct stat st;
    REQUIRE(::stat(blob_file(dir, blob).c_str(), &st) == 0);
    return uint64_t(st.st_blocks) * 512;
  };
  for (uint64_t i = 0; i < 3; ++i)
    read_all(**c, request(blob_a, i, std::string(65536, char('0' + i)), calls));
  CHECK(blocks(blob_a) >= 3 * 65536);
  read_all(**c, request(blob_b, 0, std::string(65536, 'b'), calls)); // a's chunk 0 goes
  CHECK((*c)->counters().evictions == 1);
  CHECK(blocks(blob_a) < 3 * 65536);
  CHECK(blocks(blob_a) >= 2 * 65536);
  read_all(**c, request(blob_b, 1, std::string(65536, 'b'), calls));
  read_all(**c, request(blob_b, 2, std::string(65536, 'b'), calls)); // a's last two go
  CHECK_FALSE(sys::exists(blob_file(dir, blob_a)));
  CHECK(sys::exists(blob_file(dir, blob_b)));
  calls = 0;
  CHECK(read_all(**c, request(blob_a, 1, std::string(65536, '1'), calls)) == std::string(65536, '1'));
  CHECK(calls == 1);
}

namespace {

/// Serves ranges of one in-memory blob; counts requests.
struct memory_fetcher : lazyfs::range_fetcher {
  std::string blob;
  std::atomic<int> requests{0};
  expected<std::string> fetch(const registry::blob_source&, uint64_t offset,
                              uint32_t len) override {
    ++requests;
    return blob.substr(offset, len);
  }
};

} // namespace

TEST_CASE("blob_fs reads across chunks and stops at the blob's end, verifying chunk digests",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto store = dir.path + "/store";
  auto fetcher = std::make_shared<memory_fetcher>();
  for (int i = 0; i < 3 * 4096 + 100; ++i)
    fetcher->blob += char('a' + i % 26);
  registry::blob_source src;
  src.registry = "127.0.0.1:5000";
  src.repository = "t/lazy";
  src.digest = layers::sha256_string(fetcher->blob);
  src.size = fetcher->blob.size();
  src.chunk_size = 4096;
  REQUIRE(registry::register_blob_source(store, src));
  auto hex = layers::digest_hex(src.digest);
  // The symlink the mount cache follows into the daemon's mount.
  char link[256] = {};
  REQUIRE(::readlink((store + "/blobs/sha256-" + hex + ".blob").c_str(), link, 255) > 0);
  CHECK(std::string{link} == "../lazy/mnt/sha256-" + hex + ".blob");
  REQUIRE(sys::write_file_atomic(dir.path + "/whole", fetcher->blob));
  auto list = registry::make_chunk_list(dir.path + "/whole", 4096);
  REQUIRE(list);
  CHECK(list->size() == 4 * 32);
  REQUIRE(registry::save_chunk_list(store, src.digest, *list));

  auto cache = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(cache);
  lazyfs::blob_fs fs{store, std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)), fetcher};
  REQUIRE(fs.source(hex));
  CHECK((*fs.source(hex))->size == src.size);
  CHECK(fs.source(std::string(64, 'b')).err().code == errc::not_found);
  std::string out(9000, '\0');
  auto n = fs.read(hex, 4000, 9000, out.data()); // chunks 0..3, cut at the end
  REQUIRE(n);
  CHECK(*n == src.size - 4000);
  CHECK(out.substr(0, *n) == fetcher->blob.substr(4000));
  CHECK(fetcher->requests == 1); // the four missing chunks in one range request
  CHECK(fs.cache()->counters().chunks_fetched == 4);
  CHECK(*fs.read(hex, src.size, 10, out.data()) == 0);

  // A registry that answers other bytes: refused by the chunk list, EIO.
  fetcher->blob[5000] ^= 1;
  auto cache2 = lazyfs::chunk_cache::open(dir.path + "/cache2", 1 << 20, quick_retries());
  REQUIRE(cache2);
  lazyfs::blob_fs fs2{store, std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache2)), fetcher};
  auto bad = fs2.read(hex, 4096, 10, out.data());
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("chunk list records") != std::string::npos);
  CHECK(fs2.cache()->counters().read_errors == 1);
}

TEST_CASE("the daemon's stats round-trip and render as dsec_lazy_* metrics", "[chunk_cache]") {
  test::temp_dir dir;
  lazyfs::daemon_stats s;
  s.cache.bytes_fetched = 262144;
  s.cache.chunks_fetched = 1;
  s.cache.hits = 7;
  s.cache.read_errors = 2;
  s.cache.range_requests = 3;
  s.cache.cache_bytes = 262144;
  s.open_files = 1;
  REQUIRE(lazyfs::write_stats(dir.path + "/stats.json", s));
  auto back = lazyfs::read_stats(dir.path + "/stats.json");
  REQUIRE(back);
  CHECK(back->cache.bytes_fetched == 262144);
  CHECK(back->cache.read_errors == 2);
  CHECK(back->cache.range_requests == 3);
  CHECK(back->open_files == 1);
  auto text = lazyfs::metrics_text(*back, "n1");
  CHECK(text.find("dsec_lazy_bytes_fetched_total{node=\"n1\"} 262144\n") != std::string::npos);
  CHECK(text.find("dsec_lazy_read_errors_total{node=\"n1\"} 2\n") != std::string::npos);
  CHECK(text.find("dsec_lazy_range_requests_total{node=\"n1\"} 3\n") != std::string::npos);
  CHECK(text.find("# TYPE dsec_lazy_cache_bytes gauge") != std::string::npos);
  CHECK(lazyfs::read_stats(dir.path + "/none.json").err().code == errc::not_found);
}

TEST_CASE("missing stretches are joined across short runs of held chunks, not long ones",
          "[chunk_cache]") {
  using lazyfs::chunk_span;
  using lazyfs::plan_spans;
  const uint64_t k16 = 16u << 10, gap = 64u << 10;  // a 64 KiB gap is 4 chunks
  // Nothing missing: no request.
  CHECK(plan_spans(10, {false, false, false}, k16, gap).empty());
  // One stretch.
  CHECK(plan_spans(10, {false, true, true, false}, k16, gap)
        == std::vector<chunk_span>{{11, 12}});
  // A gap of 4 held chunks (64 KiB) is fetched again to save a request ...
  CHECK(plan_spans(0, {true, false, false, false, false, true}, k16, gap)
        == std::vector<chunk_span>{{0, 5}});
  // ... one of 5 (80 KiB) is not.
  CHECK(plan_spans(0, {true, false, false, false, false, false, true}, k16, gap)
        == std::vector<chunk_span>{{0, 0}, {6, 6}});
  // Held chunks at the ends are never fetched.
  CHECK(plan_spans(0, {false, true, false, true, false, false}, k16, gap)
        == std::vector<chunk_span>{{1, 3}});
  // No gap allowed: one request per stretch, as before.
  CHECK(plan_spans(0, {true, false, true}, k16, 0)
        == std::vector<chunk_span>{{0, 0}, {2, 2}});
  // The rule is in bytes: with 128 KiB chunks a single held chunk is too wide.
  CHECK(plan_spans(0, {true, false, true}, 128u << 10, gap)
        == std::vector<chunk_span>{{0, 0}, {2, 2}});
}

TEST_CASE("a read that continues a stream reads ahead, growing with the stream",
          "[chunk_cache]") {
  lazyfs::fetch_policy p;
  p.readahead_min = 64u << 10;
  p.readahead_max = 1u << 20;
  lazyfs::stream_table t{2};
  const std::string a(64, 'a'), b(64, 'b');
  CHECK(t.note_read(a, 0, 64u << 10, p) == 0);                   // a new stream
  CHECK(t.note_read(a, 64u << 10, 64u << 10, p) == 128u << 10);  // continues: 2x min read
  CHECK(t.note_read(a, 128u << 10, 256u << 10, p) == 384u << 10); // what it has read
  CHECK(t.note_read(b, 128u << 10, 4096, p) == 0);               // another blob: no stream
  CHECK(t.note_read(a, 384u << 10, 1u << 20, p) == 1u << 20);    // capped at max
  // Two slots: a third stream replaces the least recently used (b's).
  CHECK(t.note_read(a, 9u << 20, 4096, p) == 0);
  CHECK(t.note_read(b, (128u << 10) + 4096, 4096, p) == 0);
  p.readahead_max = 0;
  CHECK(t.note_read(b, (128u << 10) + 8192, 4096, p) == 0);      // readahead off
  // A short stream (a small file and the kernel's readahead after it) gets
  // none until it has read twice the least readahead.
  p.readahead_max = 1u << 20;
  p.readahead_min = 128u << 10;
  CHECK(t.note_read(b, 0, 16u << 10, p) == 0);
  CHECK(t.note_read(b, 16u << 10, 128u << 10, p) == 0);
  CHECK(t.note_read(b, 144u << 10, 128u << 10, p) == 272u << 10);
}

TEST_CASE("blob_fs joins a read's missing chunks across held ones and reads streams ahead",
          "[chunk_cache]") {
  test::temp_dir dir;
  auto store = dir.path + "/store";
  auto fetcher = std::make_shared<memory_fetcher>();
  for (int i = 0; i < 64 * 4096; ++i)
    fetcher->blob += char('a' + (i * 7 + i / 4096) % 26);
  registry::blob_source src;
  src.registry = "127.0.0.1:5000";
  src.repository = "t/lazy";
  src.digest = layers::sha256_string(fetcher->blob);
  src.size = fetcher->blob.size();
  src.chunk_size = 4096;
  REQUIRE(registry::register_blob_source(store, src));
  REQUIRE(sys::write_file_atomic(dir.path + "/whole", fetcher->blob));
  auto list = registry::make_chunk_list(dir.path + "/whole", 4096);
  REQUIRE(list);
  REQUIRE(registry::save_chunk_list(store, src.digest, *list));
  auto hex = layers::digest_hex(src.digest);
  auto cache = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20, quick_retries());
  REQUIRE(cache);
  lazyfs::fetch_policy policy;
  policy.max_gap = 8192;  // two chunks
  policy.readahead_min = 4096;
  policy.readahead_max = 8 * 4096;
  lazyfs::blob_fs fs{store, std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)), fetcher,
                     policy};
  std::string out(16 * 4096, '\0');
  // Chunks 2 and 5 held; a read of chunks 0..9 is one request (gaps of one
  // chunk), and every byte is right (each chunk verified).
  REQUIRE(fs.read(hex, 2 * 4096, 10, out.data()));
  REQUIRE(fs.read(hex, 5 * 4096, 10, out.data()));
  REQUIRE(fetcher->requests == 2);
  auto n = fs.read(hex, 0, 10 * 4096, out.data());
  REQUIRE(n);
  CHECK(out.substr(0, *n) == fetcher->blob.substr(0, 10 * 4096));
  CHECK(fetcher->requests == 3);
  // Chunks 20..22 held: a gap of three is too wide, so chunks 19 and 23 are
  // two requests. (A new stream: no readahead.)
  REQUIRE(fs.read(hex, 20 * 4096, 3 * 4096, out.data()));
  REQUIRE(fetcher->requests == 4);
  REQUIRE(fs.read(hex, 19 * 4096, 5 * 4096, out.data()));
  CHECK(fetcher->requests == 6);
  CHECK(out.substr(0, 5 * 4096) == fetcher->blob.substr(19 * 4096, 5 * 4096));
  // A stream: 40 is new; 41 continues it (8 KiB read: twice the least
  // readahead) and fetches 41 plus 2 chunks ahead (what it has read); 42 and
  // 43 are then held and fetch nothing.
  REQUIRE(fs.read(hex, 40 * 4096, 4096, out.data()));
  CHECK(fetcher->requests == 7);
  REQUIRE(fs.read(hex, 41 * 4096, 4096, out.data()));
  CHECK(fetcher->requests == 8);
  for (uint64_t c = 42; c <= 43; ++c) {
    REQUIRE(fs.read(hex, c * 4096, 4096, out.data()));
    CHECK(out.substr(0, 4096) == fetcher->blob.substr(c * 4096, 4096));
  }
  CHECK(fetcher->requests == 8);
  CHECK(fs.cache()->holds(hex, 43));
  CHECK_FALSE(fs.cache()->holds(hex, 44));
  CHECK(fs.cache()->counters().verify_failures == 0);
}

TEST_CASE("the default budget is a tenth of the cache's disk, 2 to 64 GiB, at most half of "
          "what is free",
          "[chunk_cache]") {
  constexpr uint64_t gib = uint64_t(1) << 30;
  // A tenth of a 252 GiB disk with room to spare: 25.2 GiB.
  CHECK(lazyfs::default_chunk_cache_mb(252 * gib, 80 * gib) == 25804);
  // A small disk still gets 2 GiB; a huge one no more than 64 GiB.
  CHECK(lazyfs::default_chunk_cache_mb(10 * gib, 8 * gib) == 2048);
  CHECK(lazyfs::default_chunk_cache_mb(4096 * gib, 4000 * gib) == 64 * 1024);
  // A nearly full disk: half of what is free, and never under 256 MiB.
  CHECK(lazyfs::default_chunk_cache_mb(252 * gib, 10 * gib) == 5 * 1024);
  CHECK(lazyfs::default_chunk_cache_mb(252 * gib, 100 << 20) == 256);
}
