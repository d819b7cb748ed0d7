// The node's swap tier: a disk swap file with zswap in front of it, shared by
// the host's dsec nodes. It owns the file, zswap's global parameters while
// dsec uses them, and the way pause sends a frozen sandbox's pages past zswap.
//
// Why two parts (measured here, kernel 6.18, cgroup v1; bench/reclaim_bench.py):
// - zswap compresses pages on their way to swap into a RAM pool (lzo by
//   default, 3.6:1 on idle python heaps against zram's lz4 3.05:1; deflate,
//   5.6:1, when the host has CPU to spare), and writes its oldest pages to the
//   file when the pool is full. Idle sandboxes that the reclaim actor pages
//   out land there and come back from RAM on their next touch.
// - zswap in 6.18 keeps a page that does not compress as it is (full size) in
//   its pool, and on cgroup v1 its shrinker never writes a group's pages back
//   (the per-group zswap counters it reads are kept on cgroup v2 only), so
//   random data paged out through zswap stays in RAM: a paused 200 MiB holder
//   (64 MiB random) gave back 66%, and deflate took 4.6 s for it. A paused
//   sandbox is cold by definition: pause sends its pages past zswap
//   (pause_direct()) straight to the disk file, ~100% given back in ~0.4 s,
//   and they come back from disk as they are touched after resume (without a
//   file they go to zram: lz4, 0.3 s instead of deflate's 5.6 s).
//
// Sharing: like zram.hpp, one record under <run_dir> (/run/dsec) names the
// file (path + inode), zswap's parameters as they were before dsec set them
// and the nodes using the tier; every change happens under an flock on
// <run_dir>/swaptier.lock. The first node makes the file (fallocate, not
// sparse: swapon refuses holes; a swap header; swapon above zram's priority
// so pages take the file's slots first) and sets zswap; the next ones join; a
// node killed with -9 leaves its entry, and restarted takes it back (and
// sets zswap again, should the kill have left it mid-pause); the last node
// that stops cleanly swaps the file off, removes it and puts back every zswap
// parameter it changed. A host with a swap of its own (not dsec's zram or
// file) gets no tier: nothing of anyone else's is touched.
//
// The file lives in a host-wide dir (default /var/lib/dsec/swap), not in one
// node's state dir: the tier outlives the node that made it, and a swap file
// deleted while swapped on can no longer be swapped off by name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "sys/fd.hpp"
#include "sys/host_lock.hpp"

namespace dsec::sys {

// -- pure pieces --------------------------------------------------------------

/// zswap's global parameters the tier sets (and puts back), as the strings
/// /sys/module/zswap/parameters holds.
struct zswap_params {
  std::string enabled;          // "Y" / "N"
  std::string compressor;       // "deflate"
  std::string max_pool_percent; // "40"
};

/// A node using the tier (sys/host_lock.hpp).
using swap_tier_user = host_user;

/// The host-wide record of dsec's swap tier.
struct swap_tier_record {
  /// Absolute path of the swap file; empty when the tier has none.
  std::string file;
  int64_t file_bytes = 0;
  /// st_ino of the file when it was made (a later file at the path is not ours).
  int64_t file_ino = 0;
  /// True when dsec set zswap's parameters (and must put `saved` back).
  bool zswap = false;
  zswap_params saved;
  zswap_params set;
  std::vector<swap_tier_user> users;
};

/// Text form ("key value" lines; "saved.compressor lzo"; "user node pid start").
std::string format_swap_tier_record(const swap_tier_record& r);
/// Parses format_swap_tier_record's text; nullopt when it names neither a
/// file (absolute path) nor zswap settings.
std::optional<swap_tier_record> parse_swap_tier_record(std::string_view text);

/// The algorithm names /proc/crypto lists (its "name : x" lines), once each.
std::vector<std::string> parse_crypto_names(std::string_view proc_crypto);

/// Checks --zswap-compressor: one of the names zswap can use (deflate, lzo,
/// lzo-rle, lz4, lz4hc, zstd, 842) or "off" (leave zswap as it is). Whether
/// this kernel has it is checked at start (zswap_compressor_available).
status parse_zswap_compressor(std::string_view name);

/// Whether `name` is in /proc/crypto's text; the error lists what it has.
status zswap_compressor_available(std::string_view name, std::string_view proc_crypto);

/// The file's swap priority with --swap-order zram-first: below zram's 100,
/// so the kernel fills zram (lzo-rle, ~3:1 on python heaps here) and sends
/// only the overflow to disk.
constexpr int zram_first_file_priority = 50;

/// The default --swap-file-mb: a quarter of RAM, at most a tenth of the free
/// space of the file's filesystem and at most 16 GiB; 0 (no file) when that
/// is under 256 MiB. The file holds paused sandboxes whole (they leave RAM
/// uncompressed) and the slots of what zswap holds: a quarter of RAM lets a
/// quarter of RAM's worth of sandboxes be paused at once; a tenth of the free
/// space leaves the disk to layers and sandbox uppers. Too small: pauses past
/// it go to zram, where random data stays in RAM; too large: disk taken from
/// sandboxes (the file is allocated up front).
int64_t default_swap_file_mb(int64_t ram_bytes, int64_t fs_free_bytes);

/// Refuses a swap file that would leave less than 1 GiB free on its
/// filesystem (`dir` names it in the message).
status check_swap_file_mb(int64_t mb, int64_t fs_free_bytes, const std::string& dir);

/// Refuses a --zswap-pool-percent outside 1..90.
status check_zswap_pool_percent(int64_t percent);

// -- the tier ---------------------------------------------------------------

/// Settings of swap_tier::attach.
struct swap_tier_options {
  /// Size of the swap file in MiB; 0 = no file (zswap alone in front of zram).
  int64_t file_mb = 0;
  /// Where the file is made (its filesystem must take swap files: ext4, xfs).
  std::string dir = "/var/lib/dsec/swap";
  /// zswap's compressor; "off" leaves zswap alone. lzo: ~10x faster than
  /// deflate, and on a busy host that matters more than deflate's ratio
  /// (5.6:1 on idle python heaps against lzo's 3.6:1): with 400 agents made on
  /// this loaded 2-core machine the reclaim actor had 5.4 GiB in swap with
  /// lzo and 0.55 GiB with deflate (bench/results/density-python-swaptier-*).
  /// deflate suits a host with spare CPU; what the pool cannot hold goes to
  /// the file either way.
  std::string compressor = "lzo";
  /// zswap's max_pool_percent: its RAM pool may grow to this share of RAM;
  /// past it zswap writes its oldest pages to the swap devices. 40: enough
  /// for 3,200 idle 20 MB heaps at 5.6:1 (11 GiB of 24); more leaves too
  /// little to running sandboxes, less sends warm pages to disk.
  int pool_percent = 40;
  /// Above zram's 100: zswap's pages and pause's take the file's slots
  /// first (zram stores random data at full size in RAM; the file does not).
  /// zram_first_file_priority with --swap-order zram-first.
  int priority = 200;
  std::string node;
  std::string run_dir = "/run/dsec";
  /// True when the node uses dsec's zram: zswap is set up even without a file.
  bool zram_active = false;
};

/// The node's use of dsec's swap tier (or why it has none).
class swap_tier {
 public:
  /// Makes, joins or takes back the tier as the module comment says. Errors
  /// only for bad settings (a compressor this kernel lacks, a file the disk
  /// cannot hold); a host that cannot have the tier gets an inactive one
  /// whose describe() says why. Blocking (fallocate, swapon).
  static expected<std::shared_ptr<swap_tier>> attach(const swap_tier_options& opts);

  /// The file a record under `run_dir` names (empty if none): zram's attach
  /// must not take it for the host's own swap.
  static std::string recorded_file(const std::string& run_dir);

  /// The tier this process attached last (null when none or detached):
  /// pause reaches it through here.
  static std::shared_ptr<swap_tier> current();

  /// One log line of what the node set up or joined, and why not.
  const std::string& describe() const { return what_; }
  bool active() const { return !file_.empty() || zswap_; }
  /// The swap file's path, or empty.
  const std::string& file() const { return file_; }
  /// The compressor zswap runs with, or empty when the tier does not set zswap.
  const std::string& compressor() const { return compressor_; }

  /// While it lives, zswap takes no new pages (a global switch, so the
  /// holder's pauses run one at a time host-wide, under an flock): what is
  /// paged out meanwhile goes to the file as it is (to zram when the file is
  /// full or absent). Other nodes' reclaim in
  /// that window goes to disk too (uncompressed; fine, only less dense).
  class direct_guard {
   public:
    direct_guard(unique_fd lock, std::string restore) : lock_(std::move(lock)), restore_(std::move(restore)) {}
    direct_guard(direct_guard&&) = default;
    direct_guard& operator=(direct_guard&&) = default;
    ~direct_guard();

   private:
    unique_fd lock_;
    std::string restore_;
  };

  /// A direct_guard when the tier set zswap; nullopt otherwise (pages then go
  /// where they would anyway). Blocking (waits for
  /// another node's pause).
  std::optional<direct_guard> pause_direct() const;

  /// Takes this node out of the record; the last live user swaps the file
  /// off, removes it and puts zswap's parameters back. Idempotent. Blocking
  /// (swapoff brings what the file holds back into RAM).
  status detach();

  /// `"swap_tier":{...}` for /healthz.
  std::string health_json() const;
  /// Prometheus lines for /metrics (empty when inactive).
  std::string metrics_text(const std::string& node) const;

 private:
  swap_tier_options opts_;
  std::string file_;
  std::string compressor_;
  bool zswap_ = false;
  std::string what_;
};

} // namespace dsec::sys
