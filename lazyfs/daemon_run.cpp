// The daemon process (`dsec lazyfs`): the store's lock, the chunk cache, the
// stats writer and the FUSE loop (see daemon.hpp).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <malloc.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/clock.hpp"
#include "lazyfs/daemon.hpp"
#include "lazyfs/range_batcher.hpp"
#include "lazyfs/stats.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::lazyfs {

namespace {

using namespace std::chrono_literals;

/// Writes stats.json every second while the counters move, and at once when
/// the number of open blobs changes (stop_daemon reads it).
class stats_writer {
 public:
  stats_writer(std::string path, const blob_fs& fs, const range_batcher& batcher)
    : path_(std::move(path)), fs_(fs), batcher_(batcher) {
    thread_ = std::thread([this] { run(); });
  }

  /// Wakes the writer now (a blob was opened or released).
  void poke() {
    {
      std::lock_guard<std::mutex> guard{mu_};
      poked_ = true;
    }
    cv_.notify_all();
  }
  ~stats_writer() {
    {
      std::lock_guard<std::mutex> guard{mu_};
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    write();
  }

 private:
  void write() {
    daemon_stats s;
    s.cache = fs_.cache()->counters();
    s.budget_bytes = fs_.cache()->budget_bytes();
    s.storage_reads = batcher_.storage_reads();
    s.open_files = fs_.open_files();
    s.pid = ::getpid();
    s.updated_ms = now_ms();
    if (auto st = write_stats(path_, s); !st)
      std::cerr << "dsec lazyfs: " << st.err().message << std::endl;
    // The HTTP requests sent and the range requests they carried, beside
    // stats.json (bench/registry_bench.py reads it).
    nlohmann::json b = {{"requests", batcher_.requests()}, {"ranges", batcher_.ranges()}};
    auto dir = path_.substr(0, path_.rfind('/') + 1);
    if (auto st = sys::write_file_atomic(dir + "batch.json", b.dump() + "\n", 0644,
                                         sys::durability::process_crash);
        !st)
      std::cerr << "dsec lazyfs: " << st.err().message << std::endl;
  }

  void run() {
    std::string last;
    std::unique_lock<std::mutex> lock{mu_};
    while (!stop_) {
      poked_ = false;
      auto c = fs_.cache()->counters();
      auto open = fs_.open_files();
      auto now = std::to_string(c.hits) + "/" + std::to_string(c.misses) + "/"
                 + std::to_string(c.bytes_fetched) + "/" + std::to_string(c.read_errors) + "/"
                 + std::to_string(c.cache_bytes) + "/" + std::to_string(open);
      if (now != last) {
        lock.unlock();
        write();
        lock.lock();
        last = now;
      }
      cv_.wait_for(lock, 1000ms, [this] { return stop_ || poked_; });
    }
  }

  std::string path_;
  const blob_fs& fs_;
  const range_batcher& batcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poked_ = false;
  std::thread thread_;
};

} // namespace

int run_daemon(const daemon_options& opts, std::shared_ptr<range_fetcher> fetcher) {
  auto who = "dsec lazyfs (pid " + std::to_string(::getpid()) + ", store " + opts.store_root + ")";
  auto lazy = opts.store_root + "/lazy";
  auto mnt = registry::lazy_mount_dir(opts.store_root);
  for (auto& d : {lazy, mnt, registry::lazy_sources_dir(opts.store_root)})
    if (auto st = sys::make_dirs(d, 0755); !st) {
      std::cerr << who << ": " << st.err().message << std::endl;
      return 1;
    }
  sys::unique_fd lock{::open((lazy + "/daemon.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (!lock) {
    std::cerr << who << ": open " << lazy << "/daemon.lock: " << std::strerror(errno) << std::endl;
    return 1;
  }
  // Others probe the lock for a moment (daemon.cpp): retry briefly.
  bool locked = false;
  for (int i = 0; i < 50 && !locked; ++i) {
    locked = ::flock(lock.get(), LOCK_EX | LOCK_NB) == 0;
    if (!locked)
      std::this_thread::sleep_for(10ms);
  }
  if (!locked) {
    std::cerr << who << ": another daemon serves this store already" << std::endl;
    return 3;
  }
  // A mount left by a daemon that died: every access answers ENOTCONN.
  if (!mount_is_live(mnt))
    ::umount2(mnt.c_str(), MNT_DETACH);
  // Range bodies are a few hundred KiB each, many a second: kept on the
  // heap and reused, not mapped and unmapped (a page fault per 4 KiB) each.
  ::mallopt(M_MMAP_THRESHOLD, 16 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
  uint64_t budget_mb = opts.chunk_cache_mb;
  if (budget_mb == 0) {
    // The default: from the cache's file system as it is now.
    struct statvfs vfs;
    auto made = sys::make_dirs(opts.cache_dir, 0700);
    if (!made || ::statvfs(opts.cache_dir.c_str(), &vfs) != 0) {
      std::cerr << who << ": chunk cache " << opts.cache_dir << ": cannot size its budget: "
                << (made ? std::strerror(errno) : made.err().message) << std::endl;
      return 1;
    }
    budget_mb = default_chunk_cache_mb(uint64_t(vfs.f_blocks) * vfs.f_frsize,
                                       uint64_t(vfs.f_bavail) * vfs.f_frsize);
  }
  auto cache = chunk_cache::open(opts.cache_dir, budget_mb << 20);
  if (!cache) {
    std::cerr << who << ": " << cache.err().message << std::endl;
    return 1;
  }
  // Streams read at most 512 KiB ahead: past a file's end the bytes are
  // waste, and a burst of sandboxes reads many files each.
  fetch_policy policy;
  policy.readahead_max = 512u << 10;
  // A file read that misses is fetched whole up to 2 MiB: docker-registry
  // spends as much CPU on a 16 KiB range as on a 1 MiB one (~4.5 ms on this
  // 2-core host; bench/range_latency.py --kb 16,256,1024), so requests, not
  // bytes, bound a burst; most files of a Python tree (modules, most shared
  // objects) are one request. A bigger file (a large .so read at random
  // through mmap) fetches 2 MiB from each missing read on, not all of it.
  policy.max_file_fetch = 2u << 20;
  // While other readers wait on the registry (a burst), a miss's request
  // also carries the next files of the blob, whole and not yet held, up to
  // 512 KiB: as cheap for the registry as the file alone, and a neighbour
  // is often read by another sandbox of the image. A lone reader (a cold
  // node) fetches only its files. (README, "Neighbour files".)
  policy.neighbour_window = 512u << 10;
  policy.busy_readers = 2;
  // Misses on a blob that queue behind its request in flight go out
  // together, as one multi-range request (range_batcher.hpp).
  auto batcher = std::make_shared<range_batcher>(std::move(fetcher));
  auto fs = std::make_shared<blob_fs>(opts.store_root, std::shared_ptr<chunk_cache>(std::move(*cache)),
                                      batcher, policy);
  auto stats_path = opts.cache_dir + "/stats.json";
  nlohmann::json info = {{"pid", ::getpid()}, {"cache", opts.cache_dir}, {"stats", stats_path}};
  if (auto st = sys::write_file_atomic(lazy + "/daemon.json", info.dump() + "\n"); !st) {
    std::cerr << who << ": " << st.err().message << std::endl;
    return 1;
  }
  status served;
  {
    stats_writer writer{stats_path, *fs, *batcher};
    fs->on_open_change([&writer] { writer.poke(); });
    served = fs->serve(mnt, [&] {
      std::cout << who << ": serving " << mnt << ", chunk cache " << opts.cache_dir << " ("
                << budget_mb << " MiB)" << std::endl;
    });
    fs->on_open_change({}); // the loop is over; the writer goes next
  }
  // daemon.json names a live daemon only while the lock is held; a reader
  // checks the lock first, so a leftover file is harmless, but tidy it.
  ::unlink((lazy + "/daemon.json").c_str());
  if (!served) {
    std::cerr << who << ": " << served.err().message << std::endl;
    return 1;
  }
  std::cout << who << ": unmounted, exiting" << std::endl;
  return 0;
}

} // namespace dsec::lazyfs
