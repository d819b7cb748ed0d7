// node_context: what a node's actors share: its identity and configuration,
// the backend, the layer store and mount cache, and the worker pool for
// blocking work. Built once by the node before any actor starts; outlives them.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json_codec.hpp"
#include "layers/layer_source.hpp"
#include "journal/trajectory_store.hpp"
#include "layers/store.hpp"
#include "lazyfs/daemon.hpp"
#include "backends/backend.hpp"
#include "backends/vm/inflight.hpp"
#include "backends/vm/vm_accel.hpp"
#include "gossip/udp_transport.hpp"
#include "registry/image_resolver.hpp"
#include "registry/registry_options.hpp"
#include "sys/quota_volume.hpp"
#include "sys/worker_pool.hpp"
#include "sys/swap_tier.hpp"
#include "sys/zram.hpp"

namespace dsec {

/// Node-wide settings (from `dsec node` flags).
struct node_config {
  std::string node_id;
  /// Root of this node's local state (sandboxes, layer mounts).
  std::string state_dir = "/var/lib/dsec";
  /// Root of the layer store (default <state_dir>/store).
  std::string store_dir;
  std::string rest = "127.0.0.1:7070";
  std::string listen = "127.0.0.1:7700";
  /// host:port peers use to reach this node (TCP native + UDP gossip);
  /// defaults to `listen`.
  std::string advertise;
  /// --join seeds: any members' addresses. Empty = first node of a cluster.
  std::vector<std::string> join;
  /// Largest request body the gateway reads (file uploads); 413 beyond.
  size_t max_body_bytes = 256u << 20;
  /// Largest file GET answers; 413 beyond (whole file is held in memory).
  size_t max_file_bytes = 256u << 20;
  /// Sandboxes this node accepts at once; 429 beyond. Sized for 24 GiB.
  size_t max_sandboxes = 4096;
  /// Budget in MiB for layer images fetched from peers (--layer-cache-mb);
  /// beyond it, unused fetched images are evicted least recently used first.
  /// 0 = unlimited: a node never deletes an image unless its operator asks.
  uint64_t layer_cache_mb = 0;
  // -- reclaim and memory admission (actors/reclaim.hpp, reclaim_policy.hpp) --
  /// How often the reclaim actor samples every sandbox (--reclaim-interval-ms).
  /// 1 s: idle detection needs a few samples per idle period and admission a
  /// fresh MemAvailable; each sample is a few small cgroup file reads.
  int64_t reclaim_interval_ms = 1000;
  /// A sandbox with no CPU for this long is reclaimed (--reclaim-idle-s, may
  /// be fractional); 0 (or --no-reclaim) = measure only, never reclaim.
  int64_t reclaim_idle_ms = 30000;
  /// What admission keeps free for the kernel and the node, MiB
  /// (--memory-headroom-mb; reasons in reclaim::admission_limits).
  int64_t memory_headroom_mb = 512;
  /// Sum of memory limits may reach this x (RAM + swap) (--overcommit; 0 =
  /// no cap; reasons in reclaim::admission_limits).
  double overcommit = 16;
  /// Size in MiB of the zram swap the node makes when the host has no swap
  /// (--zram-mb); 0 = none, -1 = sys::default_zram_mb (a quarter of RAM).
  int64_t zram_mb = -1;
  // -- trajectory log (journal/trajectory_store.hpp) ---------------------------
  /// Root of the sandboxes' logs (--trajectory-dir); empty = <state_dir>/trajectories.
  /// In a cluster, a directory every node shares, so any peer serves a log
  /// and a sandbox can be rebuilt after its node is lost.
  std::string trajectory_dir;
  /// --no-trajectory: keep no log (no fast-forward, no replay); for benches.
  bool trajectory = true;
  /// --trajectory-fsync: fsync every record (survives a host crash; costs a
  /// disk flush per exec).
  bool trajectory_fsync = false;
  /// --trajectory-keep-days: how long a destroyed sandbox's log stays.
  int64_t trajectory_keep_days = 7;
  /// The swap tier (sys/swap_tier.hpp): its disk file in MiB (--swap-file-mb;
  /// 0 = none, -1 = sys::default_swap_file_mb), where it lives, zswap's
  /// compressor ("off" = leave zswap alone) and pool share.
  int64_t swap_file_mb = -1;
  std::string swap_dir = "/var/lib/dsec/swap";
  std::string zswap_compressor = "lzo";
  int zswap_pool_percent = 40;
  /// --swap-order zram-first: the file's swap priority goes below zram's, so
  /// RAM compression takes pages first and the file only what zram cannot
  /// hold (density: more agents than RAM + zram at ~3:1 hold). The default,
  /// file-first, is what pause wants (random data costs zram its full size).
  bool zram_first = false;
  // -- API keys (api/api_keys.hpp) -----------------------------------------
  /// Keys every REST and E2B call must carry (--api-key-file); empty = no
  /// check, which a node allows only on a loopback --rest or with --insecure.
  std::vector<std::string> api_keys;
  // -- images from registries (registry/*.hpp) -------------------------------
  /// How the node reaches registries: --registry-auth, --registry-ca,
  /// --insecure-registry, --registry-mirror. Shared by the node's pulls
  /// (creates that name an image) and the lazy blob daemon's range reads.
  registry::registry_options registry;
  /// Budget of the lazy blob daemon's chunk cache, MiB (--chunk-cache-mb):
  /// chunks of images read on demand, evicted least recently used first.
  /// 0: lazyfs::default_chunk_cache_mb() of the state disk (a tenth of it,
  /// 2-64 GiB); too small refetches chunks, too large only holds disk.
  uint64_t chunk_cache_mb = 0;
  /// --no-publish: never write conversions to registries (a read-only
  /// account, a registry other teams own); other nodes then convert too.
  bool publish_conversions = true;
  // -- ports (issue 26 part 3; actors/gateway_ports.hpp) ---------------------
  /// --sandbox-domain: E2B's host form `{port}-{id}.{domain}` routes a
  /// request on the REST port by its Host header; the E2B control plane
  /// answers it as the sandbox's `domain` (getHost). Empty: no host form.
  std::string sandbox_domain;
};

/// A sandbox that outlived its node process: found again at node start (its
/// record read, the backend re-attached, its layer mounts counted again) and
/// handed to the lifecycle actor, which adopts it. The record is its one
/// recovery record (actors/sandbox_record.hpp): the spec, times, layer
/// digests, CPU class, and whether it was paused with its TTL's time left.
struct recovered_sandbox : json_codec::sandbox_record {
  std::shared_ptr<backends::sandbox> sb;
};

/// Shared, thread-safe services of one node.
struct node_context {
  node_config config;
  /// The container backend (also in `backends`).
  std::shared_ptr<backends::backend> container;
  /// Every backend this node runs, by spec.backend name ("container",
  /// "microvm", "vm", ...).
  std::map<std::string, std::shared_ptr<backends::backend>> backends;
  /// Backends this node cannot run, with why ("microvm": "qemu-system-x86_64
  /// not found"): a create asking for one gets a 400 naming the cause.
  std::map<std::string, std::string> unavailable_backends;
  /// The microvm/vm guests' accelerator (decided by a probe at start); null
  /// when the node runs no VM backend.
  std::shared_ptr<backends::vm_accel> vm_accel;
  /// QEMUs being booted or restored; the stop path cancels them before the
  /// worker pool is joined (a boot may otherwise hold a worker for 90 s).
  std::shared_ptr<backends::inflight_qemus> vm_inflight;

  /// Every backend, available or not, for /healthz (never blocks).
  /// Implemented in node.cpp.
  std::vector<backend_status> backend_report() const;

  /// The backend named `name`, or null.
  backends::backend* backend_for(const std::string& name) const {
    if (auto it = backends.find(name); it != backends.end())
      return it->second.get();
    if (name == "container")
      return container.get();
    return nullptr;
  }
  std::shared_ptr<layer_source> layers;
  /// The layer store behind `layers` (snapshots are built into it); null in
  /// tests.
  std::shared_ptr<layers::store> store;
  /// The mount cache behind `layers` (the node unmounts everything at exit);
  /// null in tests.
  std::shared_ptr<layers::mount_cache> mounts;
  std::shared_ptr<sys::worker_pool> pool;
  /// The volume under <state>/sandboxes that enforces disk_mb; null if off.
  std::shared_ptr<const sys::quota_volume> quota;
  /// The gossip socket (bound at start); null in tests: no gossip actor.
  std::shared_ptr<gossip::udp_transport> gossip_net;
  /// The node's use of dsec's zram swap (sys/zram.hpp); null in tests.
  std::shared_ptr<sys::zram_swap> zram;
  /// The node's use of dsec's swap tier (sys/swap_tier.hpp); null in tests.
  std::shared_ptr<sys::swap_tier> swap_tier;
  /// The lazy blob daemon's counters file (lazyfs/stats.hpp, for /metrics)
  /// when lazy reads are on; empty when they are off (no /dev/fuse, or the
  /// daemon did not start): then images are downloaded whole.
  std::string lazy_stats_path;
  /// This node's hold on the lazy blob daemon (lazyfs/daemon.hpp); the
  /// clean stop releases it (the last node out stops the daemon).
  std::shared_ptr<lazyfs::daemon_info> lazy_daemon;
  int64_t started_at_ms = 0;
  std::atomic<int64_t> execs_total{0};
  /// Where the trajectory logs are (dir empty = no log).
  trajectory::store_options trajectory;
  /// Resolves a spec's image to a layer, one pull per image however many
  /// creates wait (registry/image_resolver.hpp); null in tests.
  std::shared_ptr<registry::image_resolver> images;
  /// Sandboxes recovered at start; the lifecycle actor takes them when it
  /// starts (before it answers anything), so this is empty afterwards.
  std::vector<recovered_sandbox> recovered;

  /// <state_dir>/sandboxes/<id>: the per-sandbox directory.
  std::string sandbox_dir(const std::string& id) const {
    return config.state_dir + "/sandboxes/" + id;
  }

  /// <state_dir>/sandboxes/<id>/record.json: the one file a restarted node
  /// needs to adopt the sandbox (json_codec::sandbox_record, written by
  /// actors/sandbox_record.hpp).
  std::string record_path(const std::string& id) const {
    return sandbox_dir(id) + "/record.json";
  }
};

using node_context_ptr = std::shared_ptr<node_context>;

} // namespace dsec
