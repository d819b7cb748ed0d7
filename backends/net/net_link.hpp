// node_link: the layer-3 path out of allow-list sandboxes. One bridge per
// node (named after a hash of the node id, so two nodes on one host never
// share one), a /20 out of 100.64.0.0/10 (carrier-grade NAT space, rarely
// used by real networks; the first free /20 at or after the node's hash),
// the bridge as gateway (.1), and an nftables table that masquerades the
// subnet, drops anything a sandbox sends to the host itself (input hook: the
// node's REST, native and gossip ports), and keeps sandboxes apart (bridge
// ports are isolated). Each sandbox gets one veth pair: `eth0` in the
// sandbox's net namespace with a /20 address and a default route.
//
// Sandboxes in mode "none" get no link at all: their namespace has only lo.
// Links are made with `ip` and `nft` (iproute2, nftables): two process
// starts per sandbox (~3 ms) against several hundred lines of netlink.
//
// Teardown (the destructor) deletes the bridge and the nft table; a node
// that died without it leaves them, and the next start of the same node id
// deletes and remakes them (its recovered sandboxes then have no network:
// closed, not open).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::net {

/// One sandbox's end of the node network.
struct sandbox_link {
  std::string host_if; ///< the veth end on the bridge
  uint32_t addr = 0;   ///< the sandbox address, network order
  int index = -1;      ///< slot in the node's pool
};

class node_link {
 public:
  /// Creates the bridge, its address and the nft table (replacing leftovers
  /// of a previous run of the same node id) and turns on IPv4 forwarding.
  static expected<std::unique_ptr<node_link>> open(const std::string& node_id);
  /// Deletes the bridge (and with it every veth on it) and the nft table.
  ~node_link();

  node_link(const node_link&) = delete;
  node_link& operator=(const node_link&) = delete;

  /// Makes a veth pair into the net namespace of `init_pid`, addresses it
  /// and routes through the bridge. On failure nothing remains.
  expected<sandbox_link> attach(const std::string& sandbox_id, pid_t init_pid);

  /// Deletes the veth pair and frees its address. Idempotent.
  void detach(sandbox_link& l);

  /// The gateway (the bridge's address), network order.
  uint32_t gateway() const;

  /// Sends sandbox TCP to ports 80/443 of the `named` set to the name
  /// check on the gateway's `port` (name_proxy.hpp), and lets it in.
  status redirect_named(uint16_t port);
  /// Adds IPv4 addresses (network order) to the `named` set (kept until
  /// the node's table goes: a stale one only costs a pass through the
  /// proxy, which splices what an address rule allows).
  void add_named(const std::vector<uint32_t>& addrs);
  const std::string& bridge() const { return bridge_; }
  const std::string& nft_table() const { return table_; }

 private:
  node_link() = default;

  std::string tag_;    ///< 6 hex digits of the node id hash
  std::string bridge_; ///< "ds<tag>br"
  std::string table_;  ///< "dsec_<tag>"
  uint32_t subnet_ = 0; ///< network order, a /20
  std::mutex m_;
  std::vector<bool> used_; ///< host slots 2..4094
  std::set<uint32_t> named_; ///< in the nft set `named`
};

/// The IPv4 nameservers of the host's /etc/resolv.conf, network order,
/// loopback ones (systemd-resolved) left out: a sandbox cannot reach them.
std::vector<uint32_t> host_nameservers();

} // namespace dsec::net
