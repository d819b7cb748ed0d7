// The node's compressed swap: a zram device that dsec makes when the host
// has no swap, so that pause and reclaim can move a sandbox's anonymous and
// tmpfs memory out of RAM (the kernel can reclaim those only into swap).
//
// One device serves every dsec node of the host. Its record, under
// <run_dir> (/run/dsec: tmpfs, gone at reboot like the device itself), names
// the device, its diskseq (which tells it from a device made later under the
// same number) and the nodes using it; every change to the record happens
// under an flock on <run_dir>/zram.lock. The first node that finds no swap
// makes the device (hot_add, lz4, disksize, swap header, swapon) and adds
// itself; the next ones find the record and add themselves; a node that
// stops cleanly takes itself out, and the last live user swaps the device
// off and removes it. A node killed with -9 leaves its entry; the same node
// restarted replaces it (no second device), and entries of dead processes
// are dropped whenever the record is read. A host that already has another
// swap, or no zram, runs without ours: nothing of anyone else's is touched.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "sys/host_lock.hpp"

namespace dsec::sys {

/// /sys/block/zramN/mm_stat, the fields a node reports (bytes).
struct zram_stats {
  /// Uncompressed bytes stored (what left the sandboxes' RAM).
  int64_t orig_data_size = 0;
  /// The same, compressed.
  int64_t compr_data_size = 0;
  /// RAM the device takes now, allocator overhead included (its real cost).
  int64_t mem_used_total = 0;
  int64_t mem_limit = 0;
  int64_t mem_used_max = 0;
  int64_t same_pages = 0;
  int64_t pages_compacted = 0;
  int64_t huge_pages = 0;
};

/// Parses mm_stat (whitespace-separated counters, at least the first three);
/// nullopt when malformed.
std::optional<zram_stats> parse_mm_stat(std::string_view text);

/// One line of /proc/swaps.
struct swap_entry {
  std::string path;
  int64_t size_kb = 0;
  int64_t used_kb = 0;
  int priority = 0;
};

/// Parses /proc/swaps (a header line, then one line per active swap).
std::vector<swap_entry> parse_proc_swaps(std::string_view text);

/// The default --zram-mb for a host with `ram_bytes` of RAM: a quarter of
/// RAM, at most 8 GiB, at least 64 MiB. zram's size is what it may store
/// uncompressed; what it costs is the compressed size. A quarter bounds the
/// worst case (incompressible data, ~1:1) to a quarter of RAM taken by the
/// device, while typical heaps (2-4:1 under lz4) cost a tenth or less; 8 GiB
/// is plenty for idle sandboxes and keeps big hosts from a device that
/// could swallow them. Too small: pause and reclaim free less; too large: a
/// host under pressure fills RAM with compressed pages.
int64_t default_zram_mb(int64_t ram_bytes);

/// The first page of a Linux swap area (v1, "SWAPSPACE2") for a device of
/// `bytes`, with `uuid` (16 bytes) and `label` (up to 16 chars).
std::string make_swap_header(int64_t bytes, size_t page_size, const unsigned char uuid[16],
                             std::string_view label);

/// A node using the device (sys/host_lock.hpp).
using zram_user = host_user;

/// The machine-wide record of dsec's zram device.
struct zram_record {
  /// "zram3".
  std::string device;
  /// /sys/block/<device>/diskseq when it was made.
  int64_t diskseq = 0;
  int64_t disksize = 0;
  std::vector<zram_user> users;
};

/// Text form of the record (one "key value" line each; "user node pid start").
std::string format_zram_record(const zram_record& r);
/// Parses format_zram_record's text; nullopt when it names no device.
std::optional<zram_record> parse_zram_record(std::string_view text);

/// Settings of zram_swap::attach.
struct zram_options {
  /// Device size in MiB; 0 turns zram off.
  int64_t size_mb = 0;
  /// This node's id (its entry in the record).
  std::string node;
  /// Where the record and lock live.
  std::string run_dir = "/run/dsec";
  /// lz4: the fastest of what this kernel offers (lzo-rle, lzo, lz4) at a
  /// ratio close to lzo's; pause and resume wait on it.
  std::string algorithm = "lz4";
  /// Above any disk swap an operator adds later, so pages go to RAM first.
  int priority = 100;
  /// Other swaps of dsec's (the swap tier's file, swap_tier.hpp): not the
  /// host's own swap, so they do not turn zram off.
  std::vector<std::string> also_ours;
};

/// The node's use of dsec's zram device (or why it has none).
class zram_swap {
 public:
  /// Makes, joins or retakes the device as the module comment says. Never
  /// fails: a node without zram runs, and describe() says why. Blocking
  /// (swapon; waits on the lock while another node swaps off).
  static std::shared_ptr<zram_swap> attach(const zram_options& opts);

  /// One log line: what the node uses ("zram: made zram1, 6144 MiB, lz4,
  /// swapon prio 100" / "zram: off (the host has swap /dev/sda2)").
  const std::string& describe() const { return what_; }

  /// True while this node is a user of dsec's device.
  bool active() const { return !device_.empty(); }

  /// "zram1", or empty.
  const std::string& device() const { return device_; }

  /// The device's size (bytes) and counters now; zeros when inactive.
  int64_t disksize() const;
  zram_stats stats() const;

  /// Takes this node out of the record; the last live user swaps the device
  /// off, resets and removes it. Idempotent. Blocking (swapoff moves what
  /// the device holds back into RAM).
  status detach();

  /// `"zram":{...}` for /healthz: active, device, disksize_bytes,
  /// stored_bytes, compressed_bytes, memory_bytes and the describe() line.
  std::string health_json() const;

  /// Prometheus lines for /metrics (empty when inactive).
  std::string metrics_text(const std::string& node) const;

 private:
  zram_options opts_;
  std::string device_;
  std::string what_;
};

} // namespace dsec::sys
