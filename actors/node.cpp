// The node runtime. Signals are blocked in every thread and taken by the main
// thread with sigwait, so SIGTERM runs an orderly shutdown: stop taking
// requests, destroy every sandbox, unmount every layer, stop the actors. A
// node that dies instead (kill -9) leaves its sandboxes running; the next
// node on the same state dir recovers them at start (recover_sandboxes).
#include "actors/node.hpp"
#include "actors/sandbox_record.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <set>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/gateway.hpp"
#include "actors/image_fetch.hpp"
#include "actors/lifecycle.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/reclaim.hpp"
#include "actors/wire_types.hpp"
#include "backends/container/container_backend.hpp"
#include "backends/container/launcher_pool.hpp"
#include "backends/policy/cpu_class.hpp"
#include "backends/vm/vm_backend.hpp"
#include "core/clock.hpp"
#include "core/host_port.hpp"
#include "core/ids.hpp"
#include "core/json_codec.hpp"
#include "layers/blob_cache.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "lazyfs/daemon.hpp"
#include "sys/cgroup.hpp"
#include "sys/fs.hpp"
#include "sys/quota_growth.hpp"

namespace dsec {

namespace {

std::string self_dir() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

/// The static init binary: $DSEC_INIT, or dsec-init beside this executable
/// (build tree: backends/dsec-init).
std::string find_init() {
  if (auto* env = ::getenv("DSEC_INIT"))
    return env;
  auto dir = self_dir();
  for (auto cand : {dir + "/dsec-init", dir + "/backends/dsec-init", dir + "/../backends/dsec-init",
                    dir + "/../libexec/dsec/dsec-init"})
    if (sys::exists(cand))
      return cand;
  return dir + "/dsec-init";
}

/// The node id: --node-id, else the one this state dir had, else a new one;
/// kept in <state_dir>/node-id so a restarted node keeps its id (sandbox ids
/// and cgroup paths name it).
expected<std::string> settle_node_id(const node_config& cfg) {
  auto path = cfg.state_dir + "/node-id";
  std::string id = cfg.node_id;
  if (id.empty()) {
    if (auto old = sys::read_file(path); old && !old->empty())
      id = old->substr(0, old->find('\n'));
    else
      id = make_node_id();
  }
  if (!valid_node_id(id))
    return invalid_argument("--node-id \"" + id + "\": use 1-32 characters of a-z, 0-9 and '-'");
  if (auto st = sys::write_file_atomic(path, id + "\n"); !st)
    return st.err();
  return id;
}

/// Counts the recovered sandbox's layer mounts again (the mount cache adopted
/// them with refcount 0), so that its destroy releases them like any other.
status retake_mounts(layers::store& store, layers::mount_cache& mounts,
                     const json_codec::sandbox_record& rec) {
  std::vector<std::string> held;
  for (size_t i = 0; i < rec.digests.size(); ++i) {
    layer_info layer;
    layer.ref = rec.spec.layers[i];
    layer.digest = rec.digests[i];
    auto dir = mounts.acquire(layer, store.blob_path(layer.digest));
    if (!dir) {
      for (auto& d : held)
        (void)mounts.release(d);
      return dir.err();
    }
    held.push_back(layer.digest);
  }
  return {};
}

/// Sandboxes left by the previous node process on this state dir (kill -9, a
/// crash) still run: their init, cgroups, overlay and layer mounts outlive it.
/// Each one with a good record is taken back (the backend re-attaches to its
/// init, its layer mounts are counted again) for the lifecycle actor to adopt;
/// the others (no or a corrupt record, init gone) are destroyed, as far as
/// anything is left. One log line per sandbox. Blocking; runs before any actor
/// starts, after the mount cache adopted the layer mounts and before it drops
/// the ones nothing holds.
std::vector<recovered_sandbox> recover_sandboxes(const node_context& ctx, layers::store& store,
                                                 layers::mount_cache& mounts) {
  std::vector<recovered_sandbox> out;
  auto root = ctx.config.state_dir + "/sandboxes";
  DIR* d = ::opendir(root.c_str());
  if (!d)
    return out;
  std::vector<std::string> ids;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.')
      ids.emplace_back(e->d_name);
  ::closedir(d);
  auto who = "dsec node " + ctx.config.node_id + ": ";
  for (auto& id : ids) {
    auto dir = root + "/" + id;
    auto rec = read_sandbox_record(ctx, id, who); // folds in a version 1 ttl.json
    // The backend that made it (its record says); without a record the
    // container backend, whose recover also reaps what is left.
    auto* backend = rec ? ctx.backend_for(rec->spec.backend) : nullptr;
    auto sb = (backend ? backend : ctx.container.get())->recover(id, dir); // the reap needs it too
    error why_not; // set when the sandbox cannot be taken back
    if (!rec)
      why_not = rec.err();
    else if (!sb)
      why_not = sb.err();
    else if (auto st = retake_mounts(store, mounts, *rec); !st)
      why_not = st.err();
    if (!why_not) {
      recovered_sandbox r{std::move(*rec), std::move(*sb)};
      std::cout << who << "recovered sandbox " << id << std::endl;
      out.push_back(std::move(r));
      continue;
    }
    status st = sb ? (*sb)->destroy() : status{};
    if ((!sb || !st) && sys::exists(dir)) { // best effort: the overlay and the directory
      ::umount2((dir + "/rootfs").c_str(), MNT_DETACH);
      st = sys::remove_tree(dir);
    }
    std::cout << who << "reaped sandbox " << id << ": " << why_not.message
              << (st ? "" : "; cleanup: " + st.err().message) << std::endl;
  }
  return out;
}

/// The quota volume over <state>/sandboxes (disk_mb), or null with a warning:
/// a node without loop devices or mkfs.btrfs still runs, unquota'd.
std::shared_ptr<const sys::quota_volume> open_quota_volume(const node_config& cfg) {
  auto dir = cfg.state_dir + "/sandboxes";
  auto image = cfg.state_dir + "/sandboxes.img";
  auto warn = [&](const std::string& why) {
    std::cerr << "dsec node: disk_mb is not enforced: " << why << std::endl;
    return nullptr;
  };
  if (!sys::is_mount_point(dir) && !sys::dir_is_empty(dir))
    return warn(dir + " holds sandboxes from a node without a quota volume");
  // It starts small and grows as sandboxes write (sys/quota_volume.hpp), up
  // to 64 GiB or half of what the host has free beside it, whichever is less.
  struct statvfs fs {};
  struct stat img {};
  uint64_t max = uint64_t{64} << 30;
  uint64_t have = ::stat(image.c_str(), &img) == 0 ? uint64_t(img.st_blocks) * 512 : 0;
  if (::statvfs(cfg.state_dir.c_str(), &fs) == 0)
    max = std::min<uint64_t>(max, have + uint64_t(fs.f_bavail) * fs.f_frsize / 2);
  std::string warning;
  auto v = sys::quota_volume::open(image, dir, max, &warning);
  if (!warning.empty())
    std::cerr << "dsec node: " << warning << std::endl;
  if (!v)
    return warn(v.err().message);
  return std::make_shared<const sys::quota_volume>(std::move(*v));
}

/// The trajectory log's options from the flags; makes the directory and
/// prunes old logs in the background (journal/trajectory_store.hpp).
status setup_trajectory(node_context& ctx) {
  auto& cfg = ctx.config;
  if (!cfg.trajectory)
    return {};
  auto& o = ctx.trajectory;
  o.dir = cfg.trajectory_dir.empty() ? cfg.state_dir + "/trajectories" : cfg.trajectory_dir;
  o.fsync = cfg.trajectory_fsync;
  o.keep_destroyed_ms = cfg.trajectory_keep_days * 24 * 3600 * 1000;
  o.keep_orphan_ms = 4 * o.keep_destroyed_ms;
  if (auto st = sys::make_dirs(o.dir, 0700); !st)
    return error{st.err().code, "node: --trajectory-dir: " + st.err().message};
  ctx.pool->post([o, who = cfg.node_id] {
    using namespace std::chrono;
    auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    if (auto n = trajectory::prune(o, now); n > 0)
      std::cout << "node " << who << ": pruned " << n << " old trajectory logs in " << o.dir
                << std::endl;
  });
  return {};
}

/// The resolver of specs' images (registry/image_resolver.hpp) over this
/// node's store, with the registry flags. Published conversions are read on
/// demand when `lazy` (the lazy blob daemon runs: it must serve a registered
/// blob before a mount names it), else downloaded whole.
std::shared_ptr<registry::image_resolver>
make_image_resolver(const node_config& cfg, std::shared_ptr<layers::store> st, bool lazy) {
  registry::resolver_options o;
  o.registry = cfg.registry;
  o.publish = cfg.publish_conversions;
  o.lazy = lazy;
  return std::make_shared<registry::image_resolver>(std::move(st), std::move(o));
}

/// The lazy blob daemon of this node's store (lazyfs/daemon.hpp): found
/// running (it outlives nodes) or started detached. Returns who serves, or
/// null when lazy reads are off: no /dev/fuse, or the daemon failed to
/// start (the cause is logged); layers from registries then come whole.
std::shared_ptr<lazyfs::daemon_info> start_lazy_reads(const node_config& cfg) {
  auto who = "dsec node " + cfg.node_id + ": lazy reads";
  if (!sys::exists("/dev/fuse")) {
    std::cout << who << " are off: this host has no /dev/fuse (image data is downloaded whole)"
              << std::endl;
    return nullptr;
  }
  lazyfs::daemon_options o;
  o.store_root = cfg.store_dir;
  o.cache_dir = cfg.state_dir + "/lazy-cache";
  o.chunk_cache_mb = cfg.chunk_cache_mb;
  o.registry = cfg.registry;
  auto d = lazyfs::ensure_daemon(o);
  if (!d) {
    std::cerr << who << " are off: " << d.err().message << std::endl;
    return nullptr;
  }
  std::cout << who << ": blob daemon pid " << d->pid << (d->reused ? " (running)" : " (started)")
            << " serves " << d->mount_dir << std::endl;
  return std::make_shared<lazyfs::daemon_info>(std::move(*d));
}

expected<node_context_ptr> make_context(node_config cfg) {
  auto ctx = std::make_shared<node_context>();
  if (cfg.store_dir.empty())
    cfg.store_dir = cfg.state_dir + "/store";
  for (auto& d : {cfg.state_dir, cfg.state_dir + "/sandboxes", cfg.state_dir + "/mounts"})
    if (auto st = sys::make_dirs(d, 0700); !st)
      return st.err();
  // Checked before anything is mounted: a node that cannot start leaves
  // nothing behind (the quota volume below is a loop mount).
  if (auto n = reclaim_samples_env(); !n)
    return n.err();
  if (auto n = backends::launchers_env(); !n)
    return n.err();
  auto init_path = find_init();
  if (!sys::exists(init_path))
    return unavailable("node: the sandbox init binary " + init_path
                       + " is missing (set DSEC_INIT)");
  ctx->quota = open_quota_volume(cfg);
  auto id = settle_node_id(cfg);
  if (!id)
    return id.err();
  cfg.node_id = *id;
  auto store = layers::store::open(cfg.store_dir);
  if (!store)
    return store.err();
  // Before the image resolver (lazy fetches need the daemon) and the layer
  // mounts: a recovered sandbox's lazy layer reads through this daemon,
  // usually the one the previous node started, which outlived it. A start
  // that fails below gives it back (the last node out stops it).
  ctx->lazy_daemon = start_lazy_reads(cfg);
  if (ctx->lazy_daemon)
    ctx->lazy_stats_path = ctx->lazy_daemon->stats_path;
  auto give_back_lazy = [&ctx] {
    if (ctx->lazy_daemon)
      (void)lazyfs::release_daemon(*ctx->lazy_daemon);
  };
  auto mounts = std::make_shared<layers::mount_cache>(cfg.state_dir + "/mounts");
  if (auto adopted = mounts->adopt_existing(); !adopted) {
    give_back_lazy();
    return adopted.err();
  }
  ctx->mounts = mounts;
  auto layer_store = std::make_shared<layers::store>(std::move(*store));
  // Images fetched from peers count against --layer-cache-mb; one a sandbox
  // has mounted is in use and never evicted.
  auto cache = std::make_shared<layers::blob_cache>(
    layer_store, [mounts](const std::string& d) { return mounts->refcount(d) > 0; },
    uint64_t(cfg.layer_cache_mb) << 20, cfg.state_dir + "/layer-cache.json");
  if (auto st = cache->load(); !st)
    std::cerr << "dsec node: " << st.err().message << std::endl;
  ctx->layers = make_store_layer_source(layer_store, mounts, cache);
  ctx->store = layer_store;
  ctx->images = make_image_resolver(cfg, layer_store, ctx->lazy_daemon != nullptr);
  backends::container_config cc;
  cc.node_id = cfg.node_id;
  cc.quota = ctx->quota;
  cc.init_path = init_path;
  ctx->container = backends::make_container_backend(cc);
  {
    backends::vm_config vc; // microvm and vm: QEMU guests, when this node can run them
    vc.node_id = cfg.node_id;
    vc.init_path = cc.init_path;
    vc.work_dir = cfg.state_dir + "/vm";
    auto vms = backends::make_vm_backends(vc);
    for (auto& [name, b] : vms.ready)
      ctx->backends[name] = b;
    for (auto& [name, why] : vms.unavailable)
      ctx->unavailable_backends[name] = why;
    ctx->vm_accel = vms.accel;
    ctx->vm_inflight = vms.inflight;
    // FnCall runs single calls from the warm pool, it makes no sandboxes.
    ctx->unavailable_backends["fncall"] =
      "fncall runs one call at a time from the node's warm pool, not sandboxes: "
      "POST /v1/fncall (Python: client.fncall())";
  }
  ctx->config = std::move(cfg);
  ctx->recovered = recover_sandboxes(*ctx, *layer_store, *mounts);
  mounts->release_unused(); // layer mounts nothing holds any more
  // Blocking work is mostly short syscalls and waits on processes; 16 threads
  // keep a burst of 16 creates in flight without queueing on 2 cores.
  ctx->pool = std::make_shared<sys::worker_pool>(16);
  ctx->started_at_ms = now_ms();
  if (auto st = setup_trajectory(*ctx); !st) {
    give_back_lazy();
    return st.err();
  }
  return ctx;
}

/// Kills the QEMUs being booted, restored or probed and refuses new ones;
/// ends the creates' waits for images (their pulls go on, detached).
void cancel_slow_work(node_context& node) {
  if (node.vm_inflight)
    node.vm_inflight->cancel_all();
  if (node.images)
    node.images->stop();
}

void block_signals(sigset_t& set) {
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

/// Runs the actors until a signal or a dead child stops the supervisor.
int serve(caf::actor_system& sys, node_context& node, const node_context_ptr& ctx,
          const std::pair<std::string, uint16_t>& rest,
          const std::pair<std::string, uint16_t>& listen, sigset_t sigs) {
  auto sup = sys.spawn(node_supervisor, ctx);
  caf::scoped_actor self{sys};
  placement_actor front; // published on --listen
  gateway_actor gateway;
  image_fetch_actor fetch;
  self->request(sup, local_wait, caf::get_atom::value)
    .receive([&](placement_actor& f, gateway_actor& g,
                 image_fetch_actor& i) { front = f, gateway = g, fetch = i; },
             [&](caf::error&) {});
  // Layers this node lacks come from peers: a create's worker blocks on the
  // image-fetch actor through the fetcher (actors/image_fetch.hpp), set before
  // the doors open so a call that comes as soon as /healthz answers finds it.
  node.layers->set_fetcher(make_layer_fetcher(fetch));
  auto stop_helpers = [&] { node.layers->set_fetcher({}); }; // it refers to the actors
  auto server = start_http_server(rest.first, rest.second, node.config.max_body_bytes,
                                  [gateway](http_call c) {
                                    caf::anon_send(gateway, http_atom::value, std::move(c));
                                  });
  auto published = server ? sys.middleman().publish(front, listen.second,
                                                    listen.first.c_str(), true)
                          : caf::expected<uint16_t>{caf::sec::runtime_error};
  if (!server || !published) {
    std::cerr << "dsec node: "
              << (!server ? server.err().message
                          : "listen on " + node.config.listen + ": " + sys.render(published.error()))
              << "\n";
    stop_helpers();
    caf::anon_send(sup, shutdown_atom::value);
    self->wait_for(sup);
    return 1;
  }
  std::cout << "dsec node " << node.config.node_id << " serving REST on " << rest.first << ":"
            << (*server)->port() << ", native on " << node.config.listen << ", state "
            << node.config.state_dir << std::endl;
  // The signal thread stops taking requests, cancels the guests being
  // booted or restored (their creates fail at once instead of holding the
  // stop for a boot deadline), then asks for an orderly stop.
  std::thread signals([&, sup] {
    int sig = 0;
    sigwait(&sigs, &sig);
    (*server)->stop();
    cancel_slow_work(node);
    caf::anon_send(sup, shutdown_atom::value);
  });
  int rc = 0;
  self->monitor(sup);
  self->receive([&](caf::down_msg& dm) { rc = dm.reason ? 1 : 0; });
  stop_helpers();
  pthread_kill(signals.native_handle(), SIGTERM); // wakes it if the stop came from inside
  signals.join();
  (*server)->stop();
  sys.middleman().unpublish(front, listen.second);
  return rc;
}

} // namespace

std::vector<backend_status> node_context::backend_report() const {
  std::vector<backend_status> out;
  std::set<std::string> names{"container"};
  for (auto& [name, b] : backends)
    names.insert(name);
  for (auto& [name, why] : unavailable_backends)
    names.insert(name);
  auto choice = vm_accel ? vm_accel->peek() : dsec::backends::accel_choice{};
  for (auto& name : names) {
    backend_status b;
    b.name = name;
    b.available = backend_for(name) != nullptr;
    if (auto it = unavailable_backends.find(name); it != unavailable_backends.end())
      b.reason = it->second;
    if (vm_accel && b.available && (name == "microvm" || name == "vm")) {
      b.accel = !choice.decided ? "probing" : choice.kvm ? "kvm" : "tcg";
      b.accel_reason = choice.decided ? choice.reason : "the kvm probe is running";
      if (!choice.refused.empty()) {
        b.available = false;
        b.reason = choice.refused;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

int run_node(node_config cfg) {
  sigset_t sigs;
  block_signals(sigs); // before any thread starts, so all inherit the mask
  auto rest = parse_host_port(cfg.rest, true);
  auto listen = parse_host_port(cfg.listen, true);
  if (!rest || !listen) {
    std::cerr << "dsec node: " << (rest ? listen.err() : rest.err()).message << "\n";
    return 2;
  }
  if (cfg.advertise.empty())
    cfg.advertise = cfg.listen;
  // Gossip shares the --listen port number, over UDP. A node on port 0 (tests,
  // benches) has no fixed address for peers and runs alone.
  std::shared_ptr<gossip::udp_transport> gossip_net;
  if (listen->second != 0) {
    auto net = gossip::udp_transport::open(listen->first, listen->second);
    if (!net) {
      std::cerr << "dsec node: " << net.err().message << "\n";
      return 1;
    }
    gossip_net = std::move(*net);
  } else if (!cfg.join.empty()) {
    std::cerr << "dsec node: --join needs a fixed --listen port (not 0)\n";
    return 2;
  }
  auto ctx = make_context(std::move(cfg));
  if (!ctx) {
    std::cerr << "dsec node: " << ctx.err().message << "\n";
    return 1;
  }
  auto& node = **ctx;
  node.gossip_net = std::move(gossip_net);
  std::shared_ptr<sys::zram_swap> zram;
  std::shared_ptr<sys::swap_tier> tier;
  {
    // Compressed swap for pause and reclaim (sys/zram.hpp): made, joined or
    // taken back; a host with its own swap or without zram runs without it.
    // The swap tier (sys/swap_tier.hpp: a disk file, zswap in front) beside
    // it; its file is not the host's swap to zram. Bad tier settings stop the
    // node (after zram is given back).
    int64_t ram = int64_t(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
    auto& c = node.config;
    sys::zram_options zo;
    zo.node = c.node_id;
    zo.size_mb = c.zram_mb >= 0 ? c.zram_mb : sys::default_zram_mb(ram);
    zo.also_ours = {sys::swap_tier::recorded_file(zo.run_dir), c.swap_dir + "/swapfile"};
    zram = sys::zram_swap::attach(zo);
    std::cout << "dsec node " << c.node_id << ": " << zram->describe() << std::endl;
    sys::swap_tier_options so;
    so.node = c.node_id;
    so.dir = c.swap_dir;
    so.compressor = c.zswap_compressor;
    so.pool_percent = c.zswap_pool_percent;
    so.zram_active = zram->active();
    so.file_mb = c.swap_file_mb;
    if (c.zram_first)
      so.priority = sys::zram_first_file_priority;
    if (so.file_mb < 0) {
      struct statvfs vfs{};
      auto probe = c.swap_dir;
      while (::statvfs(probe.c_str(), &vfs) != 0 && probe.size() > 1)
        probe = probe.substr(0, std::max<size_t>(1, probe.rfind('/')));
      so.file_mb = sys::default_swap_file_mb(ram, int64_t(vfs.f_bavail) * int64_t(vfs.f_frsize));
    }
    auto made = sys::swap_tier::attach(so);
    if (!made) {
      std::cerr << "dsec node " << c.node_id << ": " << made.err().message << "\n";
      (void)zram->detach();
      (void)node.mounts->unmount_all();
      if (node.lazy_daemon)
        (void)lazyfs::release_daemon(*node.lazy_daemon);
      if (node.quota && sys::dir_is_empty(node.quota->mount_dir()))
        (void)node.quota->unmount();
      // The cgroup parents the backends made (dsec/<node>, also in the v2
      // hierarchy for eBPF) go too, as on a clean stop.
      (void)sys::open_cgroup_v1("/sys/fs/cgroup", "dsec/" + c.node_id)->remove();
      sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec");
      return 2;
    }
    tier = *made;
    std::cout << "dsec node " << c.node_id << ": " << tier->describe() << std::endl;
  }
  node.zram = std::move(zram);
  node.swap_tier = std::move(tier);
  // Beside its sandboxes in the cpu hierarchy, so batch ones never delay it.
  backends::node_cpu_placement cpu_place{"/sys/fs/cgroup", node.config.node_id};
  if (cpu_place.err())
    std::cerr << "dsec node " << node.config.node_id << ": cpu group beside the sandboxes: "
              << cpu_place.err().message << " (the node stays where it is)\n";
  std::unique_ptr<sys::quota_growth> growth; // the volume keeps ahead of what sandboxes write
  if (node.quota)
    growth = std::make_unique<sys::quota_growth>(
      node.quota, sys::quota_keep_host_free, [id = node.config.node_id](const std::string& m) {
        std::cerr << "dsec node " << id << ": " << m << std::endl;
      });
  caf::actor_system_config acfg;
  configure_native_protocol(acfg);
  int rc = 0;
  {
    caf::actor_system sys{acfg};
    rc = serve(sys, node, *ctx, *rest, *listen, sigs);
  }
  growth.reset(); // before the volume may be unmounted
  cancel_slow_work(node); // a stop from inside: nothing may hold the pool's join
  node.pool.reset();
  if (auto st = node.mounts->unmount_all(); !st)
    std::cerr << "dsec node: " << st.err().message << "\n";
  // No layer mount of this node reads lazily any more: the daemon goes too,
  // unless another node on this host still mounts lazy layers of the store.
  if (node.lazy_daemon)
    if (auto st = lazyfs::release_daemon(*node.lazy_daemon); !st)
      std::cerr << "dsec node " << node.config.node_id << ": " << st.err().message << "\n";
  // Every sandbox is gone (or the stop failed and the next start takes over).
  if (node.quota && sys::dir_is_empty(node.quota->mount_dir()))
    if (auto st = node.quota->unmount(); !st)
      std::cerr << "dsec node: " << st.err().message << "\n";
  cpu_place.leave();
  // The node's own cgroup parents (dsec/<node-id>); empty once every sandbox is
  // gone. The shared "dsec" parent goes too when no other node uses it.
  if (auto st = sys::open_cgroup_v1("/sys/fs/cgroup", "dsec/" + node.config.node_id)->remove(); !st)
    std::cerr << "dsec node: " << st.err().message << "\n";
  sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec");
  if (auto st = node.swap_tier->detach(); !st) // the last node out puts zswap back
    std::cerr << "dsec node: swap tier: " << st.err().message << "\n";
  if (auto st = node.zram->detach(); !st) // the last dsec node out removes the zram
    std::cerr << "dsec node: zram: " << st.err().message << "\n";
  return rc;
}

} // namespace dsec
