// Unit tests of the pieces of image fetch that need no actors and no root:
// the io_uring positional writer (out-of-order chunks from several threads,
// no overwrite, missing bytes), store::add_blob (verified commit, corrupt and
// truncated images rejected and deleted) and the blob cache (LRU order,
// budget, pins, in-use and built images kept, the record surviving restart)
// and the store side of transfers (candidate order, serving chunks, commits).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "layers/blob_cache.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "layers/transfer.hpp"
#include "layers/uring_file.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using namespace dsec::layers;

namespace {

using test::temp_dir;

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::string out(n, '\0');
  for (auto& c : out)
    c = static_cast<char>(rng());
  return out;
}

std::string read_all(const std::string& path) {
  auto r = sys::read_file(path);
  REQUIRE(r);
  return *r;
}

layer_info info_for(const std::string& ref, const std::string& data) {
  layer_info info;
  info.ref = ref;
  auto at = ref.rfind('@');
  info.name = ref.substr(0, at);
  info.version = ref.substr(at + 1);
  info.kind = "workspace";
  info.digest = sha256_string(data);
  info.size_bytes = static_cast<int64_t>(data.size());
  return info;
}

/// Puts an image with `data` into `st` as if fetched; returns its digest.
std::string add_image(store& st, const std::string& ref, const std::string& data) {
  auto tmp = st.root() + "/tmp/unit-" + std::to_string(std::hash<std::string>{}(ref));
  REQUIRE(sys::write_file_atomic(tmp, data));
  auto r = st.add_blob(tmp, info_for(ref, data));
  REQUIRE(r);
  return r->digest;
}

} // namespace

TEST_CASE("uring_writer writes chunks at offsets, out of order and from several threads") {
  temp_dir d;
  auto path = d.path + "/out";
  auto data = random_bytes((5u << 20) + 123, 7); // not a multiple of the chunk
  auto w = uring_writer::create(path, 4);
  REQUIRE(w);
  constexpr size_t chunk = 256 << 10;
  std::vector<size_t> offsets;
  for (size_t off = 0; off < data.size(); off += chunk)
    offsets.push_back(off);
  std::shuffle(offsets.begin(), offsets.end(), std::mt19937{3});
  // Catch's assertions are not thread-safe: threads record the first error.
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < offsets.size(); i += 3)
        if (auto st = w->write_at(offsets[i], data.substr(offsets[i], chunk)); !st) {
          std::lock_guard<std::mutex> g{mu};
          if (first_error.empty())
            first_error = st.err().message;
        }
    });
  for (auto& t : threads)
    t.join();
  INFO(first_error);
  REQUIRE(first_error.empty());
  REQUIRE(w->finish(data.size()));
  CHECK(w->written() == data.size());
  CHECK(read_all(path) == data);
}

TEST_CASE("uring_writer never overwrites and reports missing bytes") {
  temp_dir d;
  auto path = d.path + "/out";
  REQUIRE(sys::write_file_atomic(path, "keep"));
  auto clash = uring_writer::create(path);
  REQUIRE_FALSE(clash);
  CHECK(clash.err().message.find(path) != std::string::npos);
  CHECK(read_all(path) == "keep");

  auto w = uring_writer::create(d.path + "/short");
  REQUIRE(w);
  REQUIRE(w->write_at(0, "abc"));
  auto st = w->finish(10, 50); // 7 bytes never arrive
  REQUIRE_FALSE(st);
  CHECK(st.err().code == errc::timeout);
  CHECK(st.err().message.find("only 3 of 10 bytes") != std::string::npos);
}

TEST_CASE("store::add_blob commits a verified image and rejects corrupt or truncated ones") {
  temp_dir d;
  auto st = store::open(d.path + "/store");
  REQUIRE(st);
  auto data = random_bytes(100000, 1);
  auto good = info_for("x/y@1", data);

  SECTION("a flipped byte is rejected, the temp file deleted, nothing committed") {
    auto bad = data;
    bad[5000] ^= 0x40;
    auto tmp = st->root() + "/tmp/fetch-bad";
    REQUIRE(sys::write_file_atomic(tmp, bad));
    auto r = st->add_blob(tmp, good);
    REQUIRE_FALSE(r);
    CHECK(r.err().message.find("digest mismatch") != std::string::npos);
    CHECK_FALSE(sys::exists(tmp));
    CHECK_FALSE(sys::exists(st->blob_path(good.digest)));
    CHECK(st->resolve("x/y@1").err().code == errc::not_found);
  }
  SECTION("a truncated image is rejected by size") {
    auto tmp = st->root() + "/tmp/fetch-short";
    REQUIRE(sys::write_file_atomic(tmp, data.substr(0, 99999)));
    auto r = st->add_blob(tmp, good);
    REQUIRE_FALSE(r);
    CHECK(r.err().message.find("truncated") != std::string::npos);
    CHECK_FALSE(sys::exists(tmp));
  }
  SECTION("a good image lands under its digest and resolves; again after its blob is gone") {
    auto digest = add_image(*st, "x/y@1", data);
    CHECK(digest == good.digest);
    CHECK(read_all(st->blob_path(digest)) == data);
    auto r = st->resolve("x/y@1");
    REQUIRE(r);
    CHECK(r->digest == digest);
    CHECK(r->size_bytes == 100000);
    // Evicted image, entry kept: a re-fetch puts the image back.
    REQUIRE(::unlink(st->blob_path(digest).c_str()) == 0);
    CHECK(add_image(*st, "x/y@1", data) == digest);
    CHECK(sys::exists(st->blob_path(digest)));
  }
  SECTION("a ref naming another digest is a conflict") {
    add_image(*st, "x/y@1", data);
    auto other = random_bytes(10, 2);
    auto tmp = st->root() + "/tmp/fetch-other";
    REQUIRE(sys::write_file_atomic(tmp, other));
    auto r = st->add_blob(tmp, info_for("x/y@1", other));
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::conflict);
  }
}

TEST_CASE("blob_cache evicts least recently used fetched images over budget") {
  temp_dir d;
  auto opened = store::open(d.path + "/store");
  REQUIRE(opened);
  auto st = std::make_shared<store>(std::move(*opened));
  std::set<std::string> in_use;
  auto record = d.path + "/layer-cache.json";
  auto cache = std::make_shared<blob_cache>(
    st, [&](const std::string& dg) { return in_use.count(dg) > 0; }, 2500, record);
  REQUIRE(cache->load());
  auto a = add_image(*st, "f/a@1", random_bytes(1000, 11));
  auto b = add_image(*st, "f/b@1", random_bytes(1000, 12));
  auto c = add_image(*st, "f/c@1", random_bytes(1000, 13));
  for (auto& dg : {a, b, c})
    cache->record_fetched(dg, 1000);
  cache->touch(a); // order now, oldest first: b, c, a
  CHECK(cache->store_bytes() == 3000);

  SECTION("the oldest goes first, only as many as needed") {
    CHECK(cache->evict() == std::vector<std::string>{b});
    CHECK_FALSE(sys::exists(st->blob_path(b)));
    CHECK(sys::exists(st->blob_path(a)));
    CHECK(sys::exists(st->blob_path(c)));
    CHECK(cache->store_bytes() == 2000);
    CHECK(cache->evict().empty()); // fits now
    CHECK(cache->evictions() == 1);
    // The entry stays: the layer is re-fetched on demand.
    CHECK(st->resolve("f/b@1"));
  }
  SECTION("in-use, pinned and kept images are skipped") {
    in_use.insert(b);
    cache->pin(c);
    CHECK(cache->evict(a).empty()); // a kept by argument: nothing evictable
    CHECK(cache->evict() == std::vector<std::string>{a});
    cache->unpin(c);
    in_use.clear();
  }
  SECTION("built images are never evicted") {
    auto built = add_image(*st, "b/built@1", random_bytes(5000, 14)); // not record_fetched
    auto gone = cache->evict();
    CHECK(gone.size() == 3);
    CHECK(sys::exists(st->blob_path(built)));
    CHECK(cache->store_bytes() == 5000);
  }
  SECTION("the record survives a restart, with its LRU order") {
    cache->touch(b); // order: c, a, b
    cache->record_fetched(a, 1000); // saves; order: c, b, a
    auto again = std::make_shared<blob_cache>(st, nullptr, 1500, record);
    REQUIRE(again->load());
    CHECK(again->is_fetched(a));
    CHECK(again->is_fetched(c));
    CHECK(again->evict() == std::vector<std::string>{c, b});
  }
  SECTION("budget 0 means unlimited") {
    auto unlimited = std::make_shared<blob_cache>(st, nullptr, 0, record);
    REQUIRE(unlimited->load());
    CHECK(unlimited->evict().empty());
  }
}

// -- the store side of transfers (layers/transfer.hpp) ----------------------------

TEST_CASE("fetch_candidates asks holders of the ref first, then the other alive members") {
  auto m = [](std::string id, std::string state, std::vector<std::string> layers) {
    member_info out;
    out.id = std::move(id);
    out.state = std::move(state);
    out.layers = std::move(layers);
    return out;
  };
  std::vector<member_info> view = {
    m("d", "alive", {}),          m("self", "alive", {"x/y@1"}), m("c", "alive", {"x/y@1"}),
    m("b", "suspect", {"x/y@1"}), m("a", "alive", {"other@1"}),  m("e", "dead", {}),
    m("b2", "alive", {"x/y@1"}),
  };
  auto got = fetch_candidates(view, "self", "x/y@1");
  std::vector<std::string> ids;
  for (auto& c : got)
    ids.push_back(c.id);
  CHECK(ids == std::vector<std::string>{"b2", "c", "a", "d"});
  CHECK(fetch_candidates({}, "self", "x/y@1").empty());
}

TEST_CASE("resolve_held and read_image_chunk serve what the store holds") {
  temp_dir d;
  auto st = store::open(d.path + "/store");
  REQUIRE(st);
  auto data = random_bytes(100000, 4);
  auto digest = add_image(*st, "x/y@1", data);

  auto held = resolve_held(*st, "x/y@1", "n1");
  REQUIRE(held);
  CHECK(held->digest == digest);
  CHECK(resolve_held(*st, "x/z@1", "n1").err().code == errc::not_found);

  auto chunk = read_image_chunk(*st, digest, 1000, 5000);
  REQUIRE(chunk);
  CHECK(*chunk == data.substr(1000, 5000));
  auto tail = read_image_chunk(*st, digest, 99000, 5000); // shorter only at the end
  REQUIRE(tail);
  CHECK(*tail == data.substr(99000));
  CHECK(read_image_chunk(*st, "sha256:nothex", 0, 10).err().code == errc::invalid_argument);

  // The entry stays, its image goes (evicted): not held, nothing to read.
  REQUIRE(::unlink(st->blob_path(digest).c_str()) == 0);
  auto gone = resolve_held(*st, "x/y@1", "n1");
  REQUIRE_FALSE(gone);
  CHECK(gone.err().code == errc::not_found);
  CHECK(gone.err().message.find("node n1 knows it but does not hold its image")
        != std::string::npos);
  CHECK(read_image_chunk(*st, digest, 0, 10).err().code == errc::not_found);
}

TEST_CASE("commit_fetched_image and commit_fetched_data_blob refuse what does not verify") {
  temp_dir d;
  auto st = store::open(d.path + "/store");
  REQUIRE(st);
  auto data = random_bytes(50000, 5);
  auto info = info_for("x/y@1", data);

  auto truncated = st->root() + "/tmp/fetch-short";
  REQUIRE(sys::write_file_atomic(truncated, data.substr(0, 49999)));
  auto short_image = commit_fetched_image(*st, truncated, info);
  REQUIRE_FALSE(short_image);
  CHECK(short_image.err().message.find("truncated") != std::string::npos);
  CHECK_FALSE(sys::exists(truncated));

  // Random bytes match their entry but are no EROFS image: the device table
  // cannot be read, and the error names the layer.
  auto tmp = st->root() + "/tmp/fetch-unit";
  REQUIRE(sys::write_file_atomic(tmp, data));
  auto not_erofs = commit_fetched_image(*st, tmp, info);
  REQUIRE_FALSE(not_erofs);
  CHECK(not_erofs.err().message.find("fetched layer x/y@1: ") == 0);
  CHECK_FALSE(sys::exists(tmp));

  auto bad = st->root() + "/tmp/fetch-bad";
  REQUIRE(sys::write_file_atomic(bad, "not the blob"));
  auto r = commit_fetched_data_blob(*st, bad, info, sha256_string("something else"));
  REQUIRE_FALSE(r);
  CHECK(r.err().code == errc::internal);
  CHECK(r.err().message.find("data blob digest mismatch") != std::string::npos);
  CHECK_FALSE(sys::exists(bad));
}
