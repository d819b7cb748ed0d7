// Privileged tests of the layer mount cache: real EROFS images built by the
// store, mounted with mount(2) (file-backed, no loop device) under a temp
// mount root. They need root (CAP_SYS_ADMIN) and an erofs-capable kernel, both
// of which CI has, so a missing privilege FAILS rather than skips. Every test
// checks that it leaves nothing mounted under its root.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

using namespace dsec;
using namespace dsec::layers;

namespace {

// A temp directory with a store and a mount root, removed at scope exit after
// lazily detaching anything a failed test left mounted.
struct fixture {
  std::string path;
  fixture() {
    if (::geteuid() != 0)
      FAIL("layer mount tests need root for mount(2); run the integration tests as root");
    std::string tmpl = "/tmp/dsec-mount-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~fixture() {
    for (auto& m : mounts_under(path))
      ::umount2(m.c_str(), MNT_DETACH);
    (void)sys::remove_tree(path);
  }
  std::string mounts() const { return path + "/mounts"; }

  // Mount points at or below `prefix` in /proc/self/mountinfo (one per mount).
  static std::vector<std::string> mounts_under(const std::string& prefix) {
    std::vector<std::string> out;
    for (auto& m : sys::mounts())
      if (m.point.compare(0, prefix.size(), prefix) == 0)
        out.push_back(m.point);
    return out;
  }

  // Builds a small layer whose bin/marker holds `content`.
  layer_info build(store& s, const std::string& name, const std::string& content) {
    auto src = path + "/src-" + std::to_string(++builds_);
    REQUIRE(sys::make_dirs(src + "/bin"));
    REQUIRE(sys::write_file_atomic(src + "/bin/marker", content));
    auto info = s.build(src, name, "1", "base");
    REQUIRE(info);
    return *info;
  }

 private:
  int builds_ = 0;
};

std::string read(const std::string& path) {
  auto r = sys::read_file(path);
  return r ? *r : std::string{"<unreadable>"};
}

} // namespace

TEST_CASE("a layer is mounted once and refcounted", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto layer = f.build(*s, "base/a", "alpha\n");
  mount_cache cache{f.mounts()};
  auto dir = cache.acquire(layer, s->blob_path(layer.digest));
  REQUIRE(dir);
  CHECK(*dir == f.mounts() + "/" + digest_hex(layer.digest));
  CHECK(sys::is_mount_point(*dir));
  CHECK(read(*dir + "/bin/marker") == "alpha\n");
  auto again = cache.acquire(layer, s->blob_path(layer.digest));
  REQUIRE(again);
  CHECK(*again == *dir);
  CHECK(cache.mounted() == 1);
  CHECK(cache.refcount(layer.digest) == 2);
  CHECK(fixture::mounts_under(f.mounts()).size() == 1);

  // Read-only: writes fail with EROFS.
  CHECK_FALSE(sys::write_file_atomic(*dir + "/bin/new", "x"));

  CHECK(cache.release(layer.digest));
  CHECK(cache.mounted() == 1);
  CHECK(sys::is_mount_point(*dir));
  CHECK(cache.release(layer.digest));
  CHECK(cache.mounted() == 0);
  CHECK_FALSE(sys::exists(*dir));
  CHECK(cache.release(layer.digest)); // extra release: no-op
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("two layers mount side by side", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto a = f.build(*s, "base/a", "alpha\n");
  auto b = f.build(*s, "base/b", "beta\n");
  mount_cache cache{f.mounts()};
  auto da = cache.acquire(a, s->blob_path(a.digest));
  auto db = cache.acquire(b, s->blob_path(b.digest));
  REQUIRE(da);
  REQUIRE(db);
  CHECK(read(*da + "/bin/marker") == "alpha\n");
  CHECK(read(*db + "/bin/marker") == "beta\n");
  CHECK(cache.mounted() == 2);
  CHECK(cache.unmount_all());
  CHECK(cache.mounted() == 0);
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("concurrent acquires of one digest mount it once", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto layer = f.build(*s, "base/a", "alpha\n");
  auto blob = s->blob_path(layer.digest);
  mount_cache cache{f.mounts()};
  constexpr int threads = 8;
  std::vector<std::string> dirs(threads);
  std::atomic<int> failures{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      while (!go.load())
        std::this_thread::yield();
      auto d = cache.acquire(layer, blob);
      if (d)
        dirs[i] = *d;
      else
        ++failures;
    });
  go = true;
  for (auto& t : pool)
    t.join();
  CHECK(failures == 0);
  CHECK(std::set<std::string>(dirs.begin(), dirs.end()).size() == 1);
  CHECK(cache.refcount(layer.digest) == threads);
  CHECK(fixture::mounts_under(f.mounts()).size() == 1);

  // Concurrent releases unmount exactly once, at the last one.
  pool.clear();
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&] { CHECK(cache.release(layer.digest)); });
  for (auto& t : pool)
    t.join();
  CHECK(cache.mounted() == 0);
  CHECK(fixture::mounts_under(f.mounts()).empty());
  CHECK_FALSE(sys::exists(dirs[0]));
}

TEST_CASE("acquire and release race without leaking mounts", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto layer = f.build(*s, "base/a", "alpha\n");
  auto blob = s->blob_path(layer.digest);
  mount_cache cache{f.mounts()};
  std::vector<std::thread> pool;
  std::atomic<int> failures{0};
  for (int i = 0; i < 4; ++i)
    pool.emplace_back([&] {
      for (int n = 0; n < 50; ++n) {
        auto d = cache.acquire(layer, blob);
        if (!d || read(*d + "/bin/marker") != "alpha\n")
          ++failures;
        if (!cache.release(layer.digest))
          ++failures;
      }
    });
  for (auto& t : pool)
    t.join();
  CHECK(failures == 0);
  CHECK(cache.mounted() == 0);
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("a missing blob or a bad digest mounts nothing", "[layers][mount]") {
  fixture f;
  mount_cache cache{f.mounts()};
  layer_info ghost;
  ghost.ref = "base/ghost@1";
  ghost.digest = sha256_string("ghost");
  auto r = cache.acquire(ghost, f.path + "/store/blobs/none.erofs");
  REQUIRE_FALSE(r);
  CHECK(r.err().code == errc::not_found);
  CHECK(r.err().message.find("base/ghost@1") != std::string::npos);
  CHECK(r.err().message.find("none.erofs") != std::string::npos);
  CHECK(cache.mounted() == 0);
  CHECK_FALSE(sys::exists(cache.mount_dir(ghost.digest)));

  ghost.digest = "sha256:nothex";
  auto bad = cache.acquire(ghost, "/dev/null");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().code == errc::invalid_argument);

  // A file that is not an EROFS image: refused before mount(2) (its device
  // table is read first), the error names it.
  REQUIRE(sys::make_dirs(f.path + "/junk"));
  REQUIRE(sys::write_file_atomic(f.path + "/junk/x.erofs", std::string(8192, 'j')));
  ghost.digest = sha256_string("junk");
  auto junk = cache.acquire(ghost, f.path + "/junk/x.erofs");
  REQUIRE_FALSE(junk);
  CHECK(junk.err().message.find("not an EROFS image") != std::string::npos);
  CHECK(junk.err().message.find("junk/x.erofs") != std::string::npos);
  CHECK_FALSE(sys::exists(cache.mount_dir(ghost.digest)));
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("a restarted node adopts existing mounts and recovered sandboxes re-acquire them",
          "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto a = f.build(*s, "base/a", "alpha\n");
  auto b = f.build(*s, "base/b", "beta\n");
  std::string dir_a;
  {
    mount_cache before{f.mounts()};
    dir_a = *before.acquire(a, s->blob_path(a.digest));
    REQUIRE(before.acquire(b, s->blob_path(b.digest)));
  } // the node process "dies": mounts stay
  REQUIRE(sys::make_dirs(f.mounts() + "/" + std::string(64, 'e'))); // crash leftover
  CHECK(fixture::mounts_under(f.mounts()).size() == 2);

  mount_cache after{f.mounts()};
  auto adopted = after.adopt_existing();
  REQUIRE(adopted);
  CHECK(*adopted == 2);
  CHECK(after.mounted() == 2);
  CHECK(after.refcount(a.digest) == 0);
  CHECK_FALSE(sys::exists(f.mounts() + "/" + std::string(64, 'e')));

  // The recovered sandbox using `a` re-acquires: no second mount.
  auto again = after.acquire(a, s->blob_path(a.digest));
  REQUIRE(again);
  CHECK(*again == dir_a);
  CHECK(after.refcount(a.digest) == 1);
  CHECK(fixture::mounts_under(f.mounts()).size() == 2);

  // Nobody re-acquired `b`: release_unused drops it and keeps `a`.
  CHECK(after.release_unused());
  CHECK(after.mounted() == 1);
  CHECK(fixture::mounts_under(f.mounts()).size() == 1);
  CHECK(after.release(a.digest));
  CHECK(after.mounted() == 0);
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("unmount_below clears nested mounts a killed build left", "[layers][mount]") {
  char tmpl[] = "/var/tmp/dsec-unmount-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string dir = tmpl;
  REQUIRE(sys::make_dirs(dir + "/rootfs/proc"));
  REQUIRE(::mount("proc", (dir + "/rootfs/proc").c_str(), "proc", 0, nullptr) == 0);
  REQUIRE(sys::make_dirs(dir + "/rootfs/tmp"));
  REQUIRE(::mount("tmpfs", (dir + "/rootfs/tmp").c_str(), "tmpfs", 0, nullptr) == 0);
  REQUIRE(sys::make_dirs(dir + "/rootfs/tmp/inner"));
  REQUIRE(::mount("tmpfs", (dir + "/rootfs/tmp/inner").c_str(), "tmpfs", 0, nullptr) == 0);
  CHECK_FALSE(sys::remove_tree(dir)); // never crosses into another filesystem
  sys::unmount_below(dir);
  CHECK_FALSE(sys::is_mount_point(dir + "/rootfs/proc"));
  CHECK_FALSE(sys::is_mount_point(dir + "/rootfs/tmp"));
  CHECK_FALSE(sys::is_mount_point(dir + "/rootfs/tmp/inner"));
  CHECK(sys::remove_tree(dir));
  CHECK_FALSE(sys::exists(dir));
}

// -- chunked layers: metadata image + data blob (layers/blob_device.hpp) -----

namespace {

// Random, incompressible bytes, so the data blob really holds the data.
std::string random_bytes(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  for (auto& c : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

// Overwrites `len` bytes of `path` at `off` with `byte` (through the page
// cache, so the next read of the file sees it).
void scribble(const std::string& path, off_t off, size_t len, char byte) {
  sys::unique_fd fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  REQUIRE(fd);
  std::string junk(len, byte);
  REQUIRE(::pwrite(fd.get(), junk.data(), len, off) == static_cast<ssize_t>(len));
}

} // namespace

TEST_CASE("a chunked layer keeps data in its blob and mounts with device=", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  auto src = f.path + "/src-chunked";
  REQUIRE(sys::make_dirs(src + "/bin"));
  REQUIRE(sys::make_dirs(src + "/lib/deep"));
  auto big = random_bytes(3 << 20, 1), mid = random_bytes(70000, 2);
  REQUIRE(sys::write_file_atomic(src + "/bin/marker", "chunked\n"));
  REQUIRE(sys::write_file_atomic(src + "/lib/big.bin", big));
  REQUIRE(sys::write_file_atomic(src + "/lib/deep/mid.bin", mid));
  store::build_options opts;
  opts.chunked = true;
  opts.chunk_size = 64 << 10;
  auto layer = s->build(src, "base/chunked", "1", "base", opts);
  REQUIRE(layer);

  // The image names its data blob by digest; the blob holds the data, the
  // image only metadata. Building the same tree again gives the same layer.
  auto image = s->blob_path(layer->digest);
  auto ref = read_data_blob_ref(image);
  REQUIRE(ref);
  REQUIRE(is_valid_digest(ref->digest));
  auto data = data_blob_path(image, ref->digest);
  CHECK(data == f.path + "/store/blobs/sha256-" + digest_hex(ref->digest) + ".blob");
  auto data_digest = sha256_file(data);
  REQUIRE(data_digest);
  CHECK(*data_digest == ref->digest);
  struct stat image_st, data_st;
  REQUIRE(::stat(image.c_str(), &image_st) == 0);
  REQUIRE(::stat(data.c_str(), &data_st) == 0);
  CHECK(data_st.st_size >= static_cast<off_t>(big.size() + mid.size()));
  CHECK(image_st.st_size < 64 * 1024);
  CHECK(layer->size_bytes == image_st.st_size); // the image; the blob's size is in it
  CHECK(ref->blocks * ref->block_size == static_cast<uint64_t>(data_st.st_size));
  auto same = s->build(src, "base/chunked", "1", "base", opts);
  REQUIRE(same);
  CHECK(same->digest == layer->digest);
  // A plain image of the same tree has no data blob.
  auto plain = f.build(*s, "base/plain", "plain\n");
  auto plain_ref = read_data_blob_ref(s->blob_path(plain.digest));
  REQUIRE(plain_ref);
  CHECK(plain_ref->digest.empty());

  mount_cache cache{f.mounts()};
  auto dir = cache.acquire(*layer, image);
  REQUIRE(dir);
  CHECK(read(*dir + "/bin/marker") == "chunked\n");
  CHECK(read(*dir + "/lib/big.bin") == big);
  CHECK(read(*dir + "/lib/deep/mid.bin") == mid);
  CHECK(cache.release(layer->digest));
  CHECK(fixture::mounts_under(f.mounts()).empty());

  // Reads come from the data blob: scribble over all of it and a fresh mount
  // (no erofs page cache left) reads the scribbles, not the original bytes.
  scribble(data, 0, data_st.st_size, 'Z');
  dir = cache.acquire(*layer, image);
  REQUIRE(dir);
  auto after = read(*dir + "/lib/big.bin");
  CHECK(after.size() == big.size());
  CHECK(after == std::string(big.size(), 'Z'));
  CHECK(cache.release(layer->digest));

  // A truncated data blob is refused at mount time (not as EIO in a sandbox
  // later), and a missing one is not_found naming it; neither leaves a mount.
  REQUIRE(::truncate(data.c_str(), 4096) == 0);
  auto cut = cache.acquire(*layer, image);
  REQUIRE_FALSE(cut);
  CHECK(cut.err().message.find("truncated") != std::string::npos);
  REQUIRE(::unlink(data.c_str()) == 0);
  auto gone = cache.acquire(*layer, image);
  REQUIRE_FALSE(gone);
  CHECK(gone.err().code == errc::not_found);
  CHECK(gone.err().message.find(data) != std::string::npos);
  CHECK(cache.mounted() == 0);
  CHECK_FALSE(sys::exists(cache.mount_dir(layer->digest)));
  CHECK(fixture::mounts_under(f.mounts()).empty());
}

TEST_CASE("chunked build rejects a bad chunk size", "[layers][mount]") {
  fixture f;
  auto s = store::open(f.path + "/store");
  REQUIRE(s);
  REQUIRE(sys::make_dirs(f.path + "/src/bin"));
  store::build_options opts;
  opts.chunked = true;
  opts.chunk_size = 5000;
  auto r = s->build(f.path + "/src", "base/x", "1", "base", opts);
  REQUIRE_FALSE(r);
  CHECK(r.err().code == errc::invalid_argument);
  CHECK(r.err().message.find("chunk size 5000") != std::string::npos);
}
