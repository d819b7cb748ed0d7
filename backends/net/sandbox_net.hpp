// The network and denial side of sandboxes, as the container backend sees
// it. node_net is the node-wide part: the eBPF policy_engine (loaded once at
// node start; if it cannot load, the node runs on and allow-lists are refused
// naming why), the bridge and the node's DNS resolver (made at the first
// allow-list sandbox, removed with the node), and a refresh thread that
// re-resolves domain entries whose answers expire and the host's addresses
// every 5 s. sandbox_net is one sandbox's part: its policy and counter
// entries, its veth, its parsed allow-list, the addresses its names resolved
// to; release() (or the destructor) removes all of them.
//
// DNS is closed (dns_resolver.hpp): a sandbox's /etc/resolv.conf names the
// bridge gateway, the only host address it may reach and only on port 53;
// names its rules allow are resolved upstream and their answers' addresses
// open the rule (for the record's TTL, between 30 s and 5 min); every other
// name is REFUSED and counted as a network denial ("dns NAME" in recent).
// A domain that does not resolve opens nothing and is listed in
// denials.unresolved.
//
// A sandbox in mode "none" also gets a policy entry (loopback only), so its
// refused connects are counted too; it gets no veth.
//
// Locking: node_net::m_ before sandbox_net::m_, never the other way. No
// upstream lookup runs under either lock: a slow upstream delays only the
// names it is asked about, never another sandbox's PUT .../network or DNS.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/net/dns_resolver.hpp"
#include "backends/net/name_proxy.hpp"
#include "backends/net/net_allow.hpp"
#include "backends/net/net_link.hpp"
#include "backends/net/net_policy.hpp"
#include "core/egress_sources.hpp"
#include "core/error.hpp"
#include "core/port_scan.hpp"
#include "core/types.hpp"

namespace dsec::net {

class sandbox_net;

class node_net : public std::enable_shared_from_this<node_net>,
                 public dns_gate,
                 public name_gate {
 public:
  /// Loads the programs for the node's sandboxes, whose v2 directories are
  /// <unified_root>/<parent_rel>/<id> (parent_rel = "dsec/<node_id>", no
  /// leading or trailing slash). Never fails: without eBPF, ebpf_error()
  /// says why and join() refuses allow-lists. DSEC_EBPF=off in the
  /// environment turns eBPF off (mode none keeps working, uncounted).
  static std::shared_ptr<node_net> start(const std::string& node_id,
                                         const std::string& unified_root,
                                         const std::string& parent_rel);
  ~node_net();

  /// Why eBPF is unavailable; empty if it works.
  const error& ebpf_error() const { return ebpf_error_; }

  /// Registers sandbox `id` (v2 directory `v2_dir`, init `init_pid`) with
  /// `policy`. On failure nothing of it remains.
  expected<std::unique_ptr<sandbox_net>> join(const std::string& id, const std::string& v2_dir,
                                              pid_t init_pid, const network_policy& policy);

  /// The engine, null without eBPF (tests).
  policy_engine* engine() const { return engine_.get(); }
  /// The bridge, null until the first allow-list sandbox (tests).
  node_link* link() const { return link_.get(); }

  /// The node's resolver, null until the first allow-list sandbox (tests).
  dns_resolver* resolver() const { return resolver_.get(); }

  // dns_gate: who asks, and may it (the resolver's thread).
  dns_gate::verdict admit(uint32_t src, const std::string& name) override;
  void answered(uint32_t src, const dns::message& answer) override;

  // name_gate: the SNI/Host check of named rules (the proxy's threads).
  name_gate::verdict route(uint32_t src, const addr16& dst, uint16_t port) override;
  bool allow_name(uint32_t src, const addr16& dst, uint16_t port,
                  const std::string& name) override;
  /// The name check, null until the first allow-list sandbox (tests).
  name_proxy* proxy() const { return proxy_.get(); }

  /// Removes the bridge and the nft table now, whoever still holds this
  /// object (the backend is going: a sandbox handle kept alive elsewhere
  /// must not keep them on the host). Later detaches do nothing and no new
  /// bridge is made.
  void close_link();

  /// How often expiring names, the host's addresses and denials (for port
  /// scans) are looked at. Answers live at least 30 s (sandbox_net.cpp), so
  /// a 5 s tick re-resolves a name two ticks before its first address
  /// lapses; each tick costs a map walk, one counter read per sandbox and,
  /// per expiring name, one upstream query.
  static constexpr std::chrono::seconds refresh_period{5};

 private:
  friend class sandbox_net;
  node_net() = default;

  expected<node_link*> ensure_link();
  void refresh_loop();
  /// One pass of the refresh thread (net_refresh.cpp), called without m_.
  void refresh_pass();
  /// Whether the refresh thread should end (takes m_).
  bool stopping();

  std::string node_id_;
  error ebpf_error_;
  std::unique_ptr<policy_engine> engine_;
  std::mutex link_m_;
  std::unique_ptr<node_link> link_;
  bool link_closed_ = false;
  std::unique_ptr<dns_resolver> resolver_; ///< under link_m_
  std::unique_ptr<name_proxy> proxy_;      ///< under link_m_
  error upstream_error_;
  sockaddr_in upstream_{};

  std::mutex m_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<uint64_t, sandbox_net*> members_; ///< sandboxes with domain entries
  std::map<uint32_t, sandbox_net*> by_addr_;  ///< sandboxes by veth address
  std::map<uint64_t, sandbox_net*> watched_;  ///< every sandbox with a policy entry
  std::thread refresher_;
};

class sandbox_net {
 public:
  /// Addresses kept per domain: a name with more (large CDNs) is cut off,
  /// which fails closed (connects to the rest are refused).
  static constexpr size_t max_addrs_per_domain = 16;

  ~sandbox_net() { release(); }

  /// Replaces the policy; the next connect() sees it. Makes the veth the
  /// first time the list is non-empty. Returns true if it made it now (the
  /// caller then writes /etc/resolv.conf).
  expected<bool> set(const network_policy& policy);

  /// Counters and recent denied targets; a port scan, once detected, is
  /// the first entry of `recent`.
  denial_counts denials() const;

  /// Removes the policy and counter entries and the veth. Idempotent.
  void release();

  uint64_t cgroup_id() const { return cg_; }
  const sandbox_link& link() const { return link_; }
  /// resolv.conf content naming the node's resolver ("" without a link).
  std::string resolv_conf() const;

 private:
  friend class node_net;
  sandbox_net(std::shared_ptr<node_net> node, std::string id, uint64_t cg, pid_t pid)
    : node_(std::move(node)), id_(std::move(id)), cg_(cg), pid_(pid) {}

  /// One domain of the list: the addresses it resolved to, until when.
  struct learned {
    std::vector<std::pair<addr16, std::chrono::steady_clock::time_point>> addrs;
    std::vector<std::string> chain; ///< CNAME chain names seen in answers
    std::string error;              ///< why it resolves to nothing, if so
    std::chrono::steady_clock::time_point next_refresh{};
  };

  /// An upstream lookup of one name, made with no lock held.
  using lookup = expected<std::vector<resolved_addr>>;
  /// The names whose answers expire soon (refresh thread, under m_).
  std::vector<std::string> due_locked(std::chrono::steady_clock::time_point now) const;
  /// Takes the refresh thread's lookups of due names and re-installs the
  /// rules (the names the list no longer has are ignored).
  void apply_refresh(const std::map<std::string, lookup>& answers);
  /// Reads the denial counters for the port-scan watch (refresh thread).
  void watch_for_scan();
  status install_locked();
  static void apply_lookup(learned& l, const lookup& addrs);
  /// Adds the addresses of `answer` for `domain` (its own or a lookup of
  /// one of its CNAME targets); true if the rules changed.
  bool learn_locked(const std::string& domain, const std::string& qname,
                    const dns::message& answer);
  bool name_allowed_locked(const std::string& name) const;
  void count_dns_denial(const std::string& name);
  /// Counts a denial seen in user space ("dns NAME", "sni NAME ip:443").
  void count_denial(std::string text);

  std::shared_ptr<node_net> node_;
  std::string id_;
  uint64_t cg_;
  pid_t pid_;
  mutable std::mutex m_;
  std::vector<allow_entry> entries_;
  std::vector<rule> installed_;
  std::vector<std::string> sources_; ///< per entries_ entry: its source name or ""
  std::map<std::string, learned> domains_;
  int64_t dns_denied_ = 0;
  std::vector<std::string> dns_recent_;
  /// Port-scan detection over its network denials (core/port_scan.hpp): fed
  /// by the refresh thread's pass and by every read of denials().
  mutable port_scan_watch scan_;
  sandbox_link link_;
  bool released_ = false;
  /// network.deny, parsed (backends/net/deny_list.hpp); under m_.
  std::vector<allow_entry> deny_;
};

} // namespace dsec::net
