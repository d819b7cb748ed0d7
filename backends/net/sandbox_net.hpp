// The network and denial side of sandboxes, as the container backend sees
// it. node_net is the node-wide part: the eBPF policy_engine (loaded once at
// node start; if it cannot load, the node runs on and allow-lists are refused
// naming why), the bridge (made at the first allow-list sandbox, removed with
// the node), and a refresh thread that re-resolves domain entries and the
// host's addresses every 30 s. sandbox_net is one sandbox's part: its policy
// and counter entries, its veth, its parsed allow-list; release() (or the
// destructor) removes all of them.
//
// A sandbox in mode "none" also gets a policy entry (loopback only), so its
// refused connects are counted too; it gets no veth.
//
// Locking: node_net::m_ before sandbox_net::m_, never the other way.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/net/net_allow.hpp"
#include "backends/net/net_link.hpp"
#include "backends/net/net_policy.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::net {

class sandbox_net;

class node_net : public std::enable_shared_from_this<node_net> {
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

  /// Removes the bridge and the nft table now, whoever still holds this
  /// object (the backend is going: a sandbox handle kept alive elsewhere
  /// must not keep them on the host). Later detaches do nothing and no new
  /// bridge is made.
  void close_link();

 private:
  friend class sandbox_net;
  node_net() = default;

  expected<node_link*> ensure_link();
  /// Rules for `entries`: addresses as they are, each domain as one rule
  /// per address it resolves to (at most 16), plus port 53 to the host's
  /// nameservers when the list is not empty. A domain that does not
  /// resolve is an error (the refresh then keeps the rules it had).
  expected<std::vector<rule>> resolve(const std::vector<allow_entry>& entries) const;
  void refresh_loop();

  std::string node_id_;
  error ebpf_error_;
  std::unique_ptr<policy_engine> engine_;
  std::mutex link_m_;
  std::unique_ptr<node_link> link_;
  bool link_closed_ = false;

  std::mutex m_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<uint64_t, sandbox_net*> members_; ///< sandboxes with domain entries
  std::thread refresher_;
};

class sandbox_net {
 public:
  ~sandbox_net() { release(); }

  /// Replaces the policy; the next connect() sees it. Makes the veth the
  /// first time the list is non-empty. Returns true if it made it now (the
  /// caller then writes /etc/resolv.conf).
  expected<bool> set(const network_policy& policy);

  /// Counters and recent denied targets.
  denial_counts denials() const;

  /// Removes the policy and counter entries and the veth. Idempotent.
  void release();

  uint64_t cgroup_id() const { return cg_; }
  const sandbox_link& link() const { return link_; }
  /// resolv.conf content naming the host's nameservers ("" if none usable).
  static std::string resolv_conf();

 private:
  friend class node_net;
  sandbox_net(std::shared_ptr<node_net> node, std::string id, uint64_t cg, pid_t pid)
    : node_(std::move(node)), id_(std::move(id)), cg_(cg), pid_(pid) {}

  /// Re-resolves domains and re-installs the rules (refresh thread).
  void refresh();
  status install_locked();

  std::shared_ptr<node_net> node_;
  std::string id_;
  uint64_t cg_;
  pid_t pid_;
  mutable std::mutex m_;
  std::vector<allow_entry> entries_;
  std::vector<rule> installed_;
  sandbox_link link_;
  bool released_ = false;
};

} // namespace dsec::net
