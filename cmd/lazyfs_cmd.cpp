// `dsec lazyfs` flag parsing: serve a store's lazy blobs, or stop the daemon.
#include "cmd/lazyfs_cmd.hpp"

#include <iostream>

#include "cmd/args.hpp"
#include "lazyfs/daemon.hpp"
#include "lazyfs/registry_fetcher.hpp"
#include "lazyfs/stats.hpp"

namespace dsec::cli {

namespace {

const char* usage =
  "usage: dsec lazyfs --store DIR --cache DIR [--chunk-cache-mb N] [--registry-auth FILE]\n"
  "                   [--registry-ca FILE] [--insecure-registry HOST:PORT ...]\n"
  "                   [--registry-mirror REGISTRY=MIRROR[,MIRROR...] ...]\n"
  "       dsec lazyfs --store DIR --stop\n"
  "       dsec lazyfs --store DIR --stats\n"
  "\n"
  "Serves the store's lazy data blobs (layers whose data stays in a registry) over\n"
  "FUSE at DIR/lazy/mnt, reading chunks by HTTP Range requests into a bounded chunk\n"
  "cache in --cache (default budget: a tenth of its file system, 2-64 GiB, at most\n"
  "half of its free space). Runs until the mount is unmounted or\n"
  "SIGTERM; a node starts it detached and it outlives the node. --stop unmounts and\n"
  "waits for it to exit (refused while a lazy layer is mounted); --stats prints its\n"
  "counters.\n";

} // namespace

int run_lazyfs_command(const std::vector<std::string>& words) {
  auto a = parse_args(words,
                      {"store", "cache", "chunk-cache-mb", "registry-auth", "registry-ca",
                       "insecure-registry", "registry-mirror"},
                      {"stop", "stats", "help"});
  if (a && a->has("help")) {
    std::cout << usage;
    return 0;
  }
  if (!a || !a->positional.empty() || !a->has("store")) {
    std::cerr << "dsec lazyfs: "
              << (!a ? a.err().message
                     : a->positional.empty() ? "--store is required"
                                             : "unexpected argument " + a->positional[0])
              << "\n" << usage;
    return 2;
  }
  lazyfs::daemon_options o;
  o.store_root = a->get("store");
  if (o.store_root.empty() || o.store_root[0] != '/') {
    std::cerr << "dsec lazyfs: --store must be an absolute path\n";
    return 2;
  }
  if (a->has("stop")) {
    if (auto st = lazyfs::stop_daemon(o.store_root); !st) {
      std::cerr << "dsec lazyfs: " << st.err().message << "\n";
      return st.err().code == errc::conflict ? 3 : 1;
    }
    return 0;
  }
  if (a->has("stats")) {
    auto info = lazyfs::find_daemon(o.store_root);
    auto s = info ? lazyfs::read_stats(info->stats_path) : expected<lazyfs::daemon_stats>{info.err()};
    if (!s) {
      std::cerr << "dsec lazyfs: " << s.err().message << "\n";
      return 1;
    }
    std::cout << lazyfs::metrics_text(*s, "local");
    return 0;
  }
  o.cache_dir = a->get("cache");
  if (o.cache_dir.empty() || o.cache_dir[0] != '/') {
    std::cerr << "dsec lazyfs: --cache must be an absolute path\n" << usage;
    return 2;
  }
  if (a->has("chunk-cache-mb")) {
    auto n = to_int("chunk-cache-mb", a->get("chunk-cache-mb"));
    if (!n || *n < 1) {
      std::cerr << "dsec lazyfs: --chunk-cache-mb must be a whole number of MiB, at least 1\n";
      return 2;
    }
    o.chunk_cache_mb = uint64_t(*n);
  }
  o.registry.auth_file = a->get("registry-auth");
  o.registry.ca_file = a->get("registry-ca");
  o.registry.insecure_hosts = a->all("insecure-registry");
  for (auto& m : a->all("registry-mirror"))
    if (auto st = registry::add_mirror_option(o.registry, m); !st) {
      std::cerr << "dsec lazyfs: --registry-mirror: " << st.err().message << "\n";
      return 2;
    }
  return lazyfs::run_daemon(o, std::make_shared<lazyfs::registry_fetcher>(o.registry));
}

} // namespace dsec::cli
