// Privileged tests of the layer mount cache: real EROFS images built by the
// store, mounted with mount(2) (file-backed, no loop device) under a temp
// mount root. They need root (CAP_SYS_ADMIN) and an erofs-capable kernel, both
// of which CI has, so a missing privilege FAILS rather than skips. Every test
// checks that it leaves nothing mounted under its root.
#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "layers/digest.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
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

  // A file that is not an EROFS image: mount(2) fails, the error names it.
  REQUIRE(sys::make_dirs(f.path + "/junk"));
  REQUIRE(sys::write_file_atomic(f.path + "/junk/x.erofs", std::string(8192, 'j')));
  ghost.digest = sha256_string("junk");
  auto junk = cache.acquire(ghost, f.path + "/junk/x.erofs");
  REQUIRE_FALSE(junk);
  CHECK(junk.err().message.find("mount erofs") != std::string::npos);
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
