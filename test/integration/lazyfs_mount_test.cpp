// The kernel path of lazy layers, as root: a chunked layer built by the
// store whose data blob is taken out of the store and registered as a lazy
// source; the lazy blob file system (lazyfs/blob_fs.hpp, in-process, over a
// file standing in for the registry) serves it over FUSE, and the mount cache
// mounts the EROFS image with device=<blobs/...blob>, the symlink into the
// FUSE mount. Reading one file fetches only its chunks; a source whose
// remote is gone answers EIO in bounded time. Leaves nothing mounted.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "lazyfs/blob_fs.hpp"
#include "lazyfs/daemon.hpp"
#include "registry/chunk_list.hpp"
#include "registry/lazy_source.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

using namespace dsec;
using namespace std::chrono_literals;

namespace {

/// Ranges of a local file standing in for the registry; `gone` makes every
/// request fail as a dead registry does.
struct file_fetcher : lazyfs::range_fetcher {
  std::string path;
  std::atomic<int> requests{0};
  std::atomic<bool> gone{false};
  expected<std::string> fetch(const registry::blob_source&, uint64_t offset,
                              uint32_t len) override {
    ++requests;
    if (gone)
      return unavailable("registry test: connection refused");
    sys::unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    std::string out(len, '\0');
    auto n = ::pread(fd.get(), out.data(), len, off_t(offset));
    if (n < 0)
      return sys_error("pread", path, errno);
    out.resize(size_t(n));
    return out;
  }
};

struct fixture {
  std::string path;
  fixture() {
    if (::geteuid() != 0)
      FAIL("lazy layer tests need root for mount(2) and FUSE; run the integration tests as root");
    if (!sys::exists("/dev/fuse"))
      FAIL("lazy layer tests need /dev/fuse (the kernel has FUSE on this machine kind)");
    std::string tmpl = "/tmp/dsec-lazyfs-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~fixture() {
    for (auto& m : sys::mounts())
      if (m.point.compare(0, path.size(), path) == 0)
        ::umount2(m.point.c_str(), MNT_DETACH);
    (void)sys::remove_tree(path);
  }
};

} // namespace

TEST_CASE("a lazy chunked layer mounts through the FUSE blob file system and reads on demand",
          "[lazyfs]") {
  fixture fx;
  // 64 files of 64 KiB of random bytes plus a marker: a 4 MiB data blob.
  auto src = fx.path + "/src";
  REQUIRE(sys::make_dirs(src + "/data"));
  std::mt19937 rng{42};
  for (int i = 0; i < 64; ++i) {
    std::string bytes(65536, '\0');
    for (auto& c : bytes)
      c = char(rng());
    REQUIRE(sys::write_file_atomic(src + "/data/f" + std::to_string(i), bytes));
  }
  REQUIRE(sys::write_file_atomic(src + "/marker", "lazy and right\n"));
  auto store = layers::store::open(fx.path + "/store");
  REQUIRE(store);
  layers::store::build_options bo;
  bo.chunked = true;
  bo.chunk_size = 65536;
  auto info = store->build(src, "test/lazy", "1", "workspace", bo);
  if (!info)
    FAIL(info.err().message);
  auto image = store->blob_path(info->digest);
  auto ref = layers::read_data_blob_ref(image);
  REQUIRE(ref);
  REQUIRE_FALSE(ref->digest.empty());
  // The data blob leaves the store: the "registry" holds it now.
  auto fetcher = std::make_shared<file_fetcher>();
  fetcher->path = fx.path + "/remote.blob";
  auto data = layers::data_blob_path(image, ref->digest);
  REQUIRE(::rename(data.c_str(), fetcher->path.c_str()) == 0);
  struct stat st;
  REQUIRE(::stat(fetcher->path.c_str(), &st) == 0);
  registry::blob_source bs;
  bs.registry = "127.0.0.1:1";
  bs.repository = "test/lazy";
  bs.digest = ref->digest;
  bs.size = uint64_t(st.st_size);
  bs.chunk_size = 65536;
  REQUIRE(registry::register_blob_source(store->root(), bs));
  auto list = registry::make_chunk_list(fetcher->path, bs.chunk_size);
  REQUIRE(list);
  REQUIRE(registry::save_chunk_list(store->root(), bs.digest, *list));
  auto total_chunks = int((bs.size + bs.chunk_size - 1) / bs.chunk_size);

  auto cache = lazyfs::chunk_cache::open(fx.path + "/cache", 64 << 20);
  REQUIRE(cache);
  auto fs = std::make_shared<lazyfs::blob_fs>(
    store->root(), std::shared_ptr<lazyfs::chunk_cache>(std::move(*cache)), fetcher);
  auto mnt = registry::lazy_mount_dir(store->root());
  std::promise<void> mounted;
  std::thread serving([&] {
    auto st = fs->serve(mnt, [&] { mounted.set_value(); });
    if (!st)
      FAIL_CHECK(st.err().message);
  });
  REQUIRE(mounted.get_future().wait_for(10s) == std::future_status::ready);
  CHECK(lazyfs::mount_is_live(mnt));

  layers::mount_cache mounts{fx.path + "/mounts"};
  auto dir = mounts.acquire(*info, image);
  REQUIRE(dir);
  CHECK(fs->open_files() == 1);
  auto marker = sys::read_file(*dir + "/marker");
  REQUIRE(marker);
  CHECK(*marker == "lazy and right\n");
  auto f7 = sys::read_file(*dir + "/data/f7");
  REQUIRE(f7);
  CHECK(f7->size() == 65536);
  // Two small reads fetched a few chunks, not the blob.
  CHECK(fetcher->requests > 0);
  CHECK(fetcher->requests <= 4);
  CHECK(fetcher->requests < total_chunks / 4);

  // The registry dies: what is cached still reads, the rest is EIO, soon.
  fetcher->gone = true;
  CHECK(sys::read_file(*dir + "/marker"));
  auto t0 = std::chrono::steady_clock::now();
  auto lost = sys::read_file(*dir + "/data/f50");
  CHECK_FALSE(lost);
  CHECK(std::chrono::steady_clock::now() - t0 < 25s);
  CHECK(fs->cache()->counters().read_errors >= 1);

  REQUIRE(mounts.release(info->digest));
  REQUIRE(mounts.unmount_all());
  for (int i = 0; i < 100 && fs->open_files() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(fs->open_files() == 0);
  REQUIRE(::umount2(mnt.c_str(), MNT_DETACH) == 0);
  serving.join();
  CHECK_FALSE(lazyfs::mount_is_live(mnt));
}
