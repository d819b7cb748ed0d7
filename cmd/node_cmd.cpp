// `dsec node` flag parsing.
#include "cmd/node_cmd.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <iostream>

#include "api/api_keys.hpp"
#include "actors/node.hpp"
#include "cmd/args.hpp"
#include "core/egress_sources.hpp"
#include "core/host_port.hpp"
#include "core/output_budget.hpp"
#include "registry/registry_options.hpp"
#include "sys/fs.hpp"
#include "sys/swap_tier.hpp"

namespace dsec::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    auto comma = s.find(',', start);
    auto item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty())
      out.push_back(item);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

/// Reclaim and memory admission flags (actors/reclaim.hpp); 0 or 2 (usage).
int parse_reclaim_flags(const args& a, node_config& cfg) {
  if (a.has("reclaim-idle-s")) {
    auto s = to_double("reclaim-idle-s", a.get("reclaim-idle-s"));
    if (!s || *s < 0) {
      std::cerr << "dsec node: --reclaim-idle-s must be a number of seconds (0 = no reclaim)\n";
      return 2;
    }
    cfg.reclaim_idle_ms = static_cast<int64_t>(*s * 1000);
  }
  if (a.has("no-reclaim"))
    cfg.reclaim_idle_ms = 0;
  if (a.has("reclaim-interval-ms")) {
    auto n = to_int("reclaim-interval-ms", a.get("reclaim-interval-ms"));
    if (!n || *n < 10) {
      std::cerr << "dsec node: --reclaim-interval-ms must be a whole number of ms, at least 10\n";
      return 2;
    }
    cfg.reclaim_interval_ms = *n;
  }
  if (a.has("memory-headroom-mb")) {
    auto n = to_int("memory-headroom-mb", a.get("memory-headroom-mb"));
    if (!n || *n < 0) {
      std::cerr << "dsec node: --memory-headroom-mb must be a whole number of MiB\n";
      return 2;
    }
    cfg.memory_headroom_mb = *n;
  }
  if (a.has("overcommit")) {
    auto x = to_double("overcommit", a.get("overcommit"));
    if (!x || *x < 0) {
      std::cerr << "dsec node: --overcommit must be a factor >= 0 (0 = no cap)\n";
      return 2;
    }
    cfg.overcommit = *x;
  }
  return 0;
}

/// Trajectory log flags (journal/trajectory_store.hpp); 0 or 2 (usage).
int parse_trajectory_flags(const args& a, node_config& cfg) {
  cfg.trajectory_dir = a.get("trajectory-dir");
  if (!cfg.trajectory_dir.empty() && cfg.trajectory_dir[0] != '/') {
    std::cerr << "dsec node: --trajectory-dir must be an absolute path\n";
    return 2;
  }
  cfg.trajectory = !a.has("no-trajectory");
  cfg.trajectory_fsync = a.has("trajectory-fsync");
  if (a.has("trajectory-keep-days")) {
    auto n = to_int("trajectory-keep-days", a.get("trajectory-keep-days"));
    if (!n || *n < 0 || *n > 3650) {
      std::cerr << "dsec node: --trajectory-keep-days must be a whole number of days (0-3650)\n";
      return 2;
    }
    cfg.trajectory_keep_days = *n;
  }
  return 0;
}

/// Swap flags: --zram-mb and the swap tier's (sys/swap_tier.hpp says why
/// each default); 0 or 2 (usage).
int parse_swap_flags(const args& a, node_config& cfg) {
  // --zram-mb: the compressed swap a node makes when the host has none, so
  // pause and reclaim can move anonymous and tmpfs memory out of RAM. Default
  // a quarter of RAM, at most 8 GiB (sys::default_zram_mb says why); 0 = none.
  if (a.has("zram-mb")) {
    auto n = to_int("zram-mb", a.get("zram-mb"));
    if (!n || *n < 0) {
      std::cerr << "dsec node: --zram-mb must be a whole number of MiB (0 = no zram swap; "
                   "default a quarter of RAM, at most 8192)\n";
      return 2;
    }
    cfg.zram_mb = *n;
  }
  // --swap-file-mb: the swap tier's disk file (pause writes there); default
  // sys::default_swap_file_mb, but none when --zram-mb 0 stands alone (no
  // node-managed swap at all, what test suites ask for); 0 = none.
  if (a.has("swap-file-mb")) {
    auto n = to_int("swap-file-mb", a.get("swap-file-mb"));
    if (!n || *n < 0) {
      std::cerr << "dsec node: --swap-file-mb must be a whole number of MiB (0 = no swap file; "
                   "default a quarter of RAM, at most a tenth of the disk's free space)\n";
      return 2;
    }
    cfg.swap_file_mb = *n;
  } else if (cfg.zram_mb == 0) {
    cfg.swap_file_mb = 0;
  }
  cfg.swap_dir = a.get("swap-dir", cfg.swap_dir);
  if (cfg.swap_dir.empty() || cfg.swap_dir[0] != '/') {
    std::cerr << "dsec node: --swap-dir must be an absolute path\n";
    return 2;
  }
  if (a.has("zswap-compressor")) {
    cfg.zswap_compressor = a.get("zswap-compressor");
    if (auto st = sys::parse_zswap_compressor(cfg.zswap_compressor); !st) {
      std::cerr << "dsec node: " << st.err().message << "\n";
      return 2;
    }
  }
  // --swap-order: which of the node's two swaps the kernel fills first
  // (sys/swap_tier.hpp says why file-first is the default).
  if (a.has("swap-order")) {
    auto order = a.get("swap-order");
    if (order != "file-first" && order != "zram-first") {
      std::cerr << "dsec node: --swap-order must be file-first (the default: pause and reclaim "
                   "write to the disk file) or zram-first (compressed RAM first, the file "
                   "takes the overflow)\n";
      return 2;
    }
    cfg.zram_first = order == "zram-first";
  }
  if (a.has("zswap-pool-percent")) {
    auto n = to_int("zswap-pool-percent", a.get("zswap-pool-percent"));
    if (auto st = n ? sys::check_zswap_pool_percent(*n)
                    : status{invalid_argument("--zswap-pool-percent must be a whole number")};
        !st) {
      std::cerr << "dsec node: " << st.err().message << "\n";
      return 2;
    }
    cfg.zswap_pool_percent = static_cast<int>(*n);
  }
  return 0;
}

/// Registry flags (registry/registry_options.hpp) and the lazy blob
/// daemon's cache budget; 0 or 2 (usage). Files are checked here, so a typo
/// fails the start rather than the first create that names an image.
int parse_registry_flags(const args& a, node_config& cfg) {
  auto& r = cfg.registry;
  for (auto [flag, path] : {std::pair{"registry-auth", &r.auth_file}, {"registry-ca", &r.ca_file}})
    if (a.has(flag)) {
      *path = a.get(flag);
      if (path->empty() || !sys::exists(*path)) {
        std::cerr << "dsec node: --" << flag << " " << *path << ": no such file\n";
        return 2;
      }
    }
  for (auto& host : a.all("insecure-registry")) {
    if (host.empty() || host.find_first_of("/ @") != std::string::npos) {
      std::cerr << "dsec node: --insecure-registry \"" << host
                << "\": give a registry host as references write it (host or host:port)\n";
      return 2;
    }
    r.insecure_hosts.push_back(host);
  }
  for (auto& m : a.all("registry-mirror"))
    if (auto st = registry::add_mirror_option(r, m); !st) {
      std::cerr << "dsec node: --registry-mirror: " << st.err().message << "\n";
      return 2;
    }
  if (a.has("chunk-cache-mb")) {
    auto n = to_int("chunk-cache-mb", a.get("chunk-cache-mb"));
    if (!n || *n < 1) {
      std::cerr << "dsec node: --chunk-cache-mb must be a whole number of MiB, at least 1 "
                   "(default: a tenth of the state disk, 2-64 GiB)\n";
      return 2;
    }
    cfg.chunk_cache_mb = static_cast<uint64_t>(*n);
  }
  cfg.publish_conversions = !a.has("no-publish");
  return 0;
}

/// --output-budget-mb (issue 29 part 4): the node-wide budget for kept
/// command output, and big buffers handed back to the system at free.
int apply_output_budget(const args& a) {
  return_big_buffers_at_once();
  if (!a.has("output-budget-mb"))
    return 0;
  auto n = to_int("output-budget-mb", a.get("output-budget-mb"));
  if (!n || *n < 0) {
    std::cerr << "dsec node: --output-budget-mb must be a whole number of MiB (default 256, "
                 "0 = no bound)\n";
    return 2;
  }
  output_budget::node().set_limit(uint64_t(*n) << 20);
  return 0;
}

const char* node_help =
  "Runs a node: the REST and E2B gateway, the native port and the sandboxes.\n"
  "Images from registries (specs with \"image\", dsec create --image):\n"
  "  --registry-auth FILE       docker-style config.json with credentials (default\n"
  "                             $DOCKER_CONFIG/config.json, else ~/.docker/config.json)\n"
  "  --registry-ca FILE         PEM bundle trusted besides the system CAs\n"
  "  --insecure-registry HOST   speak plain HTTP to HOST[:PORT] (repeatable)\n"
  "  --registry-mirror REG=MIRROR[,MIRROR...]\n"
  "                             mirrors tried before REG for reads (repeatable)\n"
  "  --chunk-cache-mb N         budget of the cache of image chunks read on demand\n"
  "                             (default: a tenth of the state disk, 2-64 GiB, at\n"
  "                             most half of its free space)\n"
  "  --no-publish               never publish this node's conversions to registries\n"
  "Ports inside sandboxes (/v1/sandboxes/ID/ports/PORT/...):\n"
  "  --sandbox-domain DOMAIN    also route Host PORT-ID.DOMAIN[:port] to that port (E2B's\n"
  "                             getHost), e.g. localhost or a wildcard DNS name\n"
  "Egress (network.allow):\n"
  "  --egress-sources FILE      JSON {\"pypi\": [\"mirror:443\", \"10.0.0.0/8:443\"], ...}:\n"
  "                             names specs may allow beside addresses\n"
  "  --dns-upstream IP:PORT     where the node's sandbox resolver asks (default the\n"
  "                             first nameserver of /etc/resolv.conf)\n"
  "Kept command output:\n"
  "  --output-budget-mb N       output all sandboxes' commands keep for readers, in all\n"
  "                             (default 256; 0 = no bound); past it each command keeps\n"
  "                             its newest output and drops its oldest\n";

} // namespace

int run_node_command(const std::vector<std::string>& words) {
  const char* text = "dsec node [--state-dir DIR] [--rest HOST:PORT] [--listen HOST:PORT] "
                     "[--node-id ID] [--join HOST:PORT,...] [--advertise HOST:PORT] [--store DIR] "
                     "[--max-sandboxes N] [--layer-cache-mb N] [--zram-mb N] [--swap-file-mb N] "
                     "[--swap-dir DIR] [--zswap-compressor NAME|off] [--zswap-pool-percent P] "
                     "[--swap-order file-first|zram-first] [--reclaim-idle-s S] "
                     "[--reclaim-interval-ms MS] [--no-reclaim] [--memory-headroom-mb N] "
                     "[--overcommit X] [--trajectory-dir DIR] [--no-trajectory] "
                     "[--trajectory-fsync] [--trajectory-keep-days N] "
                     "[--api-key-file FILE] [--insecure] [--registry-auth FILE] "
                     "[--registry-ca FILE] [--insecure-registry HOST ...] "
                     "[--registry-mirror REG=MIRROR[,MIRROR...] ...] [--chunk-cache-mb N] "
                     "[--no-publish] [--sandbox-domain DOMAIN] "
                     "[--egress-sources FILE] [--dns-upstream IP:PORT] [--output-budget-mb N]";
  auto a = parse_args(words,
                      {"state-dir", "rest", "listen", "node-id", "join", "advertise", "store",
                       "max-sandboxes", "layer-cache-mb", "zram-mb", "swap-file-mb", "swap-dir",
                       "zswap-compressor", "zswap-pool-percent", "swap-order",
                       // reclaim and memory admission
                       "reclaim-idle-s", "reclaim-interval-ms", "memory-headroom-mb", "overcommit",
                       "trajectory-dir", "trajectory-keep-days", "api-key-file",
                       // registries (images)
                       "registry-auth", "registry-ca", "insecure-registry", "registry-mirror",
                       "chunk-cache-mb",
                       // ports (issue 26 part 3)
                       "sandbox-domain",
                       // egress by name, closed DNS (issue 29)
                       "egress-sources", "dns-upstream",
                       // kept command output, node-wide (issue 29 part 4)
                       "output-budget-mb"},
                      {"no-reclaim", "no-trajectory", "trajectory-fsync", "insecure", "no-publish",
                       "help"});
  if (!a || !a->positional.empty()) {
    std::cerr << "dsec node: " << (a ? "unexpected argument " + a->positional[0] : a.err().message)
              << "\nusage: " << text << "\n";
    return 2;
  }
  if (a->has("help")) {
    std::cout << "usage: " << text << "\n" << node_help;
    return 0;
  }
  node_config cfg;
  cfg.state_dir = a->get("state-dir", cfg.state_dir);
  cfg.rest = a->get("rest", cfg.rest);
  cfg.listen = a->get("listen", cfg.listen);
  cfg.node_id = a->get("node-id");
  cfg.store_dir = a->get("store");
  if (a->has("max-sandboxes")) {
    auto n = to_int("max-sandboxes", a->get("max-sandboxes"));
    if (!n || *n < 1) {
      std::cerr << "dsec node: --max-sandboxes must be a positive whole number\n";
      return 2;
    }
    cfg.max_sandboxes = static_cast<size_t>(*n);
  }
  if (a->has("layer-cache-mb")) {
    auto n = to_int("layer-cache-mb", a->get("layer-cache-mb"));
    if (!n || *n < 0) {
      std::cerr << "dsec node: --layer-cache-mb must be a whole number of MiB (0 = unlimited)\n";
      return 2;
    }
    cfg.layer_cache_mb = static_cast<uint64_t>(*n);
  }
  if (auto rc = parse_swap_flags(*a, cfg); rc != 0)
    return rc;
  if (auto rc = parse_reclaim_flags(*a, cfg); rc != 0)
    return rc;
  if (auto rc = parse_trajectory_flags(*a, cfg); rc != 0)
    return rc;
  if (auto rc = parse_registry_flags(*a, cfg); rc != 0)
    return rc;
  // API keys: required for a REST address other hosts can reach, because
  // whoever reaches it can create sandboxes and run code in them.
  if (a->has("api-key-file")) {
    auto keys = load_api_keys(a->get("api-key-file"));
    if (!keys) {
      std::cerr << "dsec node: --api-key-file: " << keys.err().message << "\n";
      return 2;
    }
    cfg.api_keys = std::move(*keys);
  }
  if (auto hp = parse_host_port(cfg.rest, true);
      hp && cfg.api_keys.empty() && !a->has("insecure") && !is_loopback_host(hp->first)) {
    std::cerr << "dsec node: --rest " << cfg.rest
              << " is reachable from other hosts: give --api-key-file FILE (one key per line), "
                 "or --insecure to serve it without keys\n";
    return 2;
  }
  if (a->has("sandbox-domain")) {
    auto d = a->get("sandbox-domain");
    if (d.empty() || d.front() == '.' || d.find_first_of("/ \t") != std::string::npos) {
      std::cerr << "dsec node: --sandbox-domain must be a DNS name (optionally :port), got \""
                << d << "\"\n";
      return 2;
    }
    for (auto& ch : d)
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    cfg.sandbox_domain = d;
  }
  // Named egress sources: a file that does not parse stops the node here,
  // naming its line and field, rather than refusing specs later.
  if (a->has("egress-sources")) {
    auto src = net::load_egress_sources(a->get("egress-sources"));
    if (!src) {
      std::cerr << "dsec node: --egress-sources: " << src.err().message << "\n";
      return 2;
    }
    net::install_egress_sources(std::move(*src));
  }
  if (a->has("dns-upstream")) {
    net::set_dns_upstream(a->get("dns-upstream"));
    auto up = parse_host_port(a->get("dns-upstream"), false);
    in_addr ip{};
    if (!up || inet_pton(AF_INET, up->first.c_str(), &ip) != 1) {
      std::cerr << "dsec node: --dns-upstream " << a->get("dns-upstream")
                << ": must be IPv4:PORT (the resolver the node asks for its sandboxes)\n";
      return 2;
    }
  }
  // Peers: comma-separated host:port of any members' --listen.
  for (auto& seed : split_list(a->get("join"))) {
    if (auto hp = parse_host_port(seed, false); !hp) {
      std::cerr << "dsec node: --join " << seed << ": " << hp.err().message << "\n";
      return 2;
    }
    cfg.join.push_back(seed);
  }
  if (auto rc = apply_output_budget(*a); rc != 0)
    return rc;
  cfg.advertise = a->get("advertise", cfg.listen);
  // A node on --listen port 0 runs alone (no fixed address to gossip); it
  // needs a real address only to join or when one is given.
  bool needs_address = a->has("advertise") || !cfg.join.empty()
                       || cfg.advertise.size() < 2
                       || cfg.advertise.compare(cfg.advertise.size() - 2, 2, ":0") != 0;
  if (auto hp = parse_host_port(cfg.advertise, !needs_address);
      needs_address && (!hp || hp->first == "0.0.0.0" || hp->first.empty())) {
    std::cerr << "dsec node: --advertise " << cfg.advertise
              << ": peers need a concrete host:port to reach this node (set --advertise when "
                 "--listen is a wildcard)\n";
    return 2;
  }
  if (cfg.state_dir.empty() || cfg.state_dir[0] != '/') {
    std::cerr << "dsec node: --state-dir must be an absolute path\n";
    return 2;
  }
  return run_node(std::move(cfg));
}

} // namespace dsec::cli
