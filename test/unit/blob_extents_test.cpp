// Whole-file lazy reads: the data blob extents read from a chunked layer's
// EROFS metadata (layers/erofs_extents.hpp, built by the store as dsec
// builds every chunked layer), their saved form (registry/blob_extents.hpp),
// the span a missing read fetches (lazyfs/fetch_plan.hpp) and the read path
// that uses it (lazyfs/blob_fs.hpp): one range request per file, nothing
// past its end. Runs mkfs.erofs; needs no root and mounts nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/erofs_extents.hpp"
#include "layers/store.hpp"
#include "lazyfs/blob_fs.hpp"
#include "lazyfs/fetch_plan.hpp"
#include "registry/blob_extents.hpp"
#include "registry/chunk_list.hpp"
#include "registry/lazy_source.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using layers::blob_extent;

namespace {

/// Distinct bytes per file, so an extent names the file it holds.
std::string content(int seed, size_t size) {
  std::string s(size, '\0');
  uint32_t x = 2654435761u * uint32_t(seed + 1);
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = char(x >> 16);
  }
  return s;
}

struct counting_fetcher : lazyfs::range_fetcher {
  std::string blob;
  std::atomic<int> requests{0};
  std::atomic<uint64_t> bytes{0};
  expected<std::string> fetch(const registry::blob_source&, uint64_t offset,
                              uint32_t len) override {
    ++requests;
    bytes += len;
    return blob.substr(offset, len);
  }
};

} // namespace

TEST_CASE("the blob extents of a chunked layer are exactly its files' bytes", "[blob_extents]") {
  test::temp_dir t;
  std::map<std::string, std::string> files{
    {"a.py", content(1, 1500)},          // one block
    {"lib/b.so", content(2, 70000)},     // 18 chunks of 4 KiB
    {"lib/deep/c.bin", content(3, 4096)},
    {"empty", ""},                       // no data, no extent
  };
  for (auto& [rel, data] : files) {
    auto path = t.path + "/src/" + rel;
    REQUIRE(sys::make_dirs(path.substr(0, path.rfind('/')), 0755));
    REQUIRE(sys::write_file_atomic(path, data));
  }
  auto st = layers::store::open(t.path + "/store");
  REQUIRE(st);
  layers::store::build_options opts;
  opts.chunked = true;
  opts.chunk_size = 4096;
  auto info = st->build(t.path + "/src", "t/ext", "1", "workspace", opts);
  INFO((info ? std::string{} : info.err().message));
  REQUIRE(info);
  auto image = st->blob_path(info->digest);
  auto ref = layers::read_data_blob_ref(image);
  REQUIRE(ref);
  auto blob = sys::read_file(layers::data_blob_path(image, ref->digest));
  REQUIRE(blob);

  auto ext = layers::read_blob_extents(image);
  REQUIRE(ext);
  REQUIRE(ext->size() == 3);
  // Each extent holds one whole file (a file's chunks are contiguous), and
  // every non-empty file is one extent.
  std::vector<std::string> held;
  for (auto& e : *ext)
    held.push_back(blob->substr(e.start, e.end - e.start));
  for (auto& [rel, data] : files)
    if (!data.empty())
      CHECK(std::count(held.begin(), held.end(), data) == 1);
  for (size_t i = 1; i < ext->size(); ++i)
    CHECK((*ext)[i - 1].end <= (*ext)[i].start);

  // Saved beside the chunk list, and read back the same.
  auto digest = ref->digest;
  CHECK(registry::load_blob_extents(t.path + "/store", digest).err().code == errc::not_found);
  REQUIRE(registry::save_blob_extents(t.path + "/store", digest, *ext));
  auto back = registry::load_blob_extents(t.path + "/store", digest);
  REQUIRE(back);
  CHECK(*back == *ext);

  // Not an image, a cut one: invalid_argument naming it, never a crash.
  auto bad = layers::parse_blob_extents(std::string(4096, 'x'), "junk.erofs");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().code == errc::invalid_argument);
  CHECK(bad.err().message.find("junk.erofs: not an EROFS image") != std::string::npos);
  auto whole = sys::read_file(image);
  REQUIRE(whole);
  for (size_t cut : {size_t(1200), whole->size() / 2, whole->size() - 8}) {
    auto r = layers::parse_blob_extents(whole->substr(0, cut), "cut.erofs");
    if (!r)
      CHECK(r.err().code == errc::invalid_argument);
  }
  CHECK(layers::read_blob_extents(t.path + "/nope.erofs").err().code == errc::not_found);
}

TEST_CASE("blob extents round-trip and refuse malformed lists; extent_at finds the holder",
          "[blob_extents]") {
  std::vector<blob_extent> ext{{0, 1500}, {4096, 74096}, {77824, 81920}};
  auto back = layers::decode_blob_extents(layers::encode_blob_extents(ext));
  REQUIRE(back);
  CHECK(*back == ext);
  CHECK(layers::decode_blob_extents(std::string(17, '\0')).err().code == errc::invalid_argument);
  auto overlapping = layers::encode_blob_extents({{0, 100}, {50, 200}});
  CHECK(layers::decode_blob_extents(overlapping).err().code == errc::invalid_argument);
  auto empty = layers::encode_blob_extents({{10, 10}});
  CHECK(layers::decode_blob_extents(empty).err().code == errc::invalid_argument);

  struct row { uint64_t offset; int index; };  // -1: none
  for (auto r : {row{0, 0}, row{1499, 0}, row{1500, -1}, row{4095, -1}, row{4096, 1},
                 row{74095, 1}, row{74096, -1}, row{81919, 2}, row{81920, -1}}) {
    INFO("offset " << r.offset);
    auto* e = layers::extent_at(ext, r.offset);
    if (r.index < 0)
      CHECK(e == nullptr);
    else
      CHECK(e == &ext[size_t(r.index)]);
  }
}

TEST_CASE("a missing read fetches the whole file it starts in, within a bound", "[blob_extents]") {
  // 4 KiB chunks; files at [0,1500), [4096,74096), [77824,81920) and a big
  // one at [81920, 81920+1 MiB); the blob is 2 MiB.
  std::vector<blob_extent> ext{{0, 1500}, {4096, 74096}, {77824, 81920},
                               {81920, 81920 + (1u << 20)}};
  const uint64_t blob = 2u << 20, max = 256u << 10;
  struct row {
    const char* what;
    uint64_t offset, len, max;
    lazyfs::chunk_span want;
  };
  for (auto r : {
         row{"small file: its one chunk", 0, 4096, max, {0, 0}},
         row{"first page of a file: all of it", 4096, 4096, max, {1, 18}},
         row{"the middle of a file: all of it", 40960, 4096, max, {1, 18}},
         row{"a read running past the file: the file and the read", 73728, 8192, max, {1, 19}},
         row{"a big file: the bound from the read on", 81920 + 8192, 4096, max, {22, 22 + 63}},
         row{"no extent: the read's own chunks", 1536u << 10, 8192, max, {384, 385}},
         row{"bound 0: the read's own chunks", 4096, 4096, 0, {1, 1}},
         row{"clipped to the blob", blob - 100, 4096, max, {511, 511}},
       }) {
    INFO(r.what);
    auto got = lazyfs::whole_file_span(ext, r.offset, r.len, 4096, blob, r.max);
    CHECK(got == r.want);
  }
}

TEST_CASE("blob_fs reads a file whole on its first miss, in one request, and no further",
          "[blob_extents]") {
  test::temp_dir dir;
  auto store = dir.path + "/store";
  auto fetcher = std::make_shared<counting_fetcher>();
  fetcher->blob = content(9, 40 * 4096);
  registry::blob_source src;
  src.registry = "127.0.0.1:5000";
  src.repository = "t/lazy";
  src.digest = layers::sha256_string(fetcher->blob);
  src.size = fetcher->blob.size();
  src.chunk_size = 4096;
  REQUIRE(sys::write_file_atomic(dir.path + "/whole", fetcher->blob));
  auto list = registry::make_chunk_list(dir.path + "/whole", 4096);
  REQUIRE(list);
  REQUIRE(registry::save_chunk_list(store, src.digest, *list));
  // Files: chunks 0..9 (ends mid-chunk 9) and 9..19 (starts in chunk 9).
  std::vector<blob_extent> ext{{0, 9 * 4096 + 100}, {9 * 4096 + 4096 - 512, 20 * 4096}};
  REQUIRE(registry::save_blob_extents(store, src.digest, ext));
  REQUIRE(registry::register_blob_source(store, src));
  auto hex = layers::digest_hex(src.digest);
  auto cache = lazyfs::chunk_cache::open(dir.path + "/cache", 1 << 20);
  REQUIRE(cache);
  lazyfs::fetch_policy policy;
  policy.max_file_fetch = 1u << 20;
  lazyfs::blob_fs fs{store, std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)), fetcher,
                     policy};
  std::string out(4096, '\0');
  // The first page of file one: chunks 0..9, one request, verified bytes.
  auto n = fs.read(hex, 0, 4096, out.data());
  REQUIRE(n);
  CHECK(out == fetcher->blob.substr(0, 4096));
  CHECK(fetcher->requests == 1);
  CHECK(fetcher->bytes == 10 * 4096);
  CHECK_FALSE(fs.cache()->holds(hex, 10));
  // Anywhere else in it: no request.
  for (uint64_t off : {uint64_t(4096), uint64_t(8 * 4096), uint64_t(9 * 4096)}) {
    REQUIRE(fs.read(hex, off, 100, out.data()));
    CHECK(out.substr(0, 100) == fetcher->blob.substr(off, 100));
  }
  CHECK(fetcher->requests == 1);
  // File two starts in held chunk 9: its missing chunks 10..19, one request.
  REQUIRE(fs.read(hex, 10 * 4096, 4096, out.data()));
  CHECK(fetcher->requests == 2);
  CHECK(fetcher->bytes == 20 * 4096);
  CHECK(fs.cache()->holds(hex, 19));
  CHECK_FALSE(fs.cache()->holds(hex, 20));
}

TEST_CASE("a busy miss also fetches the next files, whole, up to the window", "[blob_extents]") {
  // 4 KiB chunks. Files: A [0,1500), B [4096,10000), C [10240,30000),
  // D [32768,36864), E [36864,200000), and a big F [204800, 204800+1 MiB).
  std::vector<blob_extent> ext{{0, 1500},      {4096, 10000},  {10240, 30000},
                               {32768, 36864}, {36864, 200000}, {204800, 204800 + (1u << 20)}};
  auto none_held = [](uint64_t) { return true; };
  struct row {
    const char* what;
    uint64_t offset;
    lazyfs::chunk_span span;
    uint64_t window;
    lazyfs::chunk_span want;
  };
  for (auto r : {
         row{"window 0: unchanged", 0, {0, 0}, 0, {0, 0}},
         row{"A, 16 KiB: A and B; C does not fit", 0, {0, 0}, 16384,
             {0, 2}},
         row{"A, 36 KiB: A through D", 0, {0, 0}, 36 << 10, {0, 8}},
         row{"C, 64 KiB: C and D; E does not fit", 12288, {2, 7}, 64 << 10, {2, 8}},
         row{"D, 1 MiB: D and E; F does not fit", 32768, {8, 8}, 1u << 20, {8, 48}},
         row{"F truncated by the file bound: unchanged", 204800, {50, 113}, 4u << 20, {50, 113}},
         row{"no extent at the read: unchanged", 31000, {7, 7}, 1u << 20, {7, 7}},
       }) {
    INFO(r.what);
    CHECK(lazyfs::neighbour_span(ext, r.span, r.offset, 4096, r.window, none_held) == r.want);
  }
  // A held chunk ends the run before the file that holds it.
  auto c_held = [](uint64_t i) { return i != 5; };
  CHECK(lazyfs::neighbour_span(ext, {0, 0}, 0, 4096, 1u << 20, c_held) == lazyfs::chunk_span{0, 2});
}

TEST_CASE("blob_fs adds the next files to a miss only while other readers wait",
          "[blob_extents]") {
  test::temp_dir dir;
  auto store = dir.path + "/store";
  auto fetcher = std::make_shared<counting_fetcher>();
  fetcher->blob = content(11, 40 * 4096);
  registry::blob_source src;
  src.registry = "127.0.0.1:5000";
  src.repository = "t/lazy";
  src.digest = layers::sha256_string(fetcher->blob);
  src.size = fetcher->blob.size();
  src.chunk_size = 4096;
  REQUIRE(sys::write_file_atomic(dir.path + "/whole", fetcher->blob));
  auto list = registry::make_chunk_list(dir.path + "/whole", 4096);
  REQUIRE(list);
  REQUIRE(registry::save_chunk_list(store, src.digest, *list));
  // Files of 2, 3, 3, 4 and 20 chunks.
  std::vector<blob_extent> ext{
    {0, 2 * 4096}, {2 * 4096, 5 * 4096}, {5 * 4096, 8 * 4096}, {8 * 4096, 12 * 4096},
    {12 * 4096, 32 * 4096}};
  REQUIRE(registry::save_blob_extents(store, src.digest, ext));
  REQUIRE(registry::register_blob_source(store, src));
  auto hex = layers::digest_hex(src.digest);
  auto open_fs = [&](const std::string& name, int busy) {
    auto cache = lazyfs::chunk_cache::open(dir.path + "/" + name, 1 << 20);
    REQUIRE(cache);
    lazyfs::fetch_policy policy;
    policy.max_file_fetch = 1u << 20;
    policy.neighbour_window = 8 * 4096;
    policy.busy_readers = busy;
    return std::make_unique<lazyfs::blob_fs>(
      store, std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)), fetcher, policy);
  };
  std::string out(4096, '\0');
  SECTION("a lone reader fetches its file only") {
    auto fs = open_fs("lone", 1);
    REQUIRE(fs->read(hex, 0, 4096, out.data()));
    CHECK(fetcher->requests == 1);
    CHECK(fetcher->bytes == 2 * 4096);
    CHECK_FALSE(fs->cache()->holds(hex, 2));
    CHECK(fs->waiting_readers() == 0);
  }
  SECTION("a busy one: the next whole files within 8 chunks, in the same request") {
    auto fs = open_fs("busy", 0);
    REQUIRE(fs->read(hex, 4096, 4096, out.data()));
    CHECK(out == fetcher->blob.substr(4096, 4096));
    CHECK(fetcher->requests == 1);
    CHECK(fetcher->bytes == 8 * 4096);  // files 0-2; file 3 does not fit
    for (uint64_t i = 0; i < 8; ++i)
      CHECK(fs->cache()->holds(hex, i));
    CHECK_FALSE(fs->cache()->holds(hex, 8));
    // File 2 is served without a request, and verified.
    REQUIRE(fs->read(hex, 6 * 4096, 4096, out.data()));
    CHECK(out == fetcher->blob.substr(6 * 4096, 4096));
    CHECK(fetcher->requests == 1);
    // File 3 misses: it alone (file 4, 20 chunks, does not fit), one request.
    REQUIRE(fs->read(hex, 8 * 4096, 4096, out.data()));
    CHECK(fetcher->requests == 2);
    CHECK(fetcher->bytes == 12 * 4096);
    CHECK(fs->waiting_readers() == 0);
  }
}
