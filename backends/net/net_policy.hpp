// policy_engine: the node-wide owner of dsec's eBPF security programs
// (dsec_sec.bpf.c). It loads them once per node (load + verify ~50-90 ms),
// attaches the four socket hooks once to the node's v2 cgroup parent with
// BPF_F_ALLOW_MULTI and the sys_exit counter globally, and then keeps one
// policy entry and one counter entry per sandbox, keyed by the cgroup id of
// the sandbox's v2 directory. A policy update is one map update, atomic for
// the kernel: the next connect() sees the new list.
//
// Why one attachment on the parent and not one per sandbox: attaching four
// programs per sandbox costs four bpf(LINK_CREATE) calls and four links on
// every create, while a map entry costs one update; the programs find the
// sandbox by `bpf_get_current_ancestor_cgroup_id(level)`, which also covers
// any sub-cgroup inside the sandbox. Sockets of cgroups without an entry
// (none exist below the node's parent) pass untouched.
//
// The syscall numbers counted as denials live in ONE table in
// net_policy.cpp (`counted_syscalls`): the seccomp filter's refusals
// (backends/policy/seccomp_filter.cpp) and the file-modifying calls.
//
// Thread-safe: the kernel maps are the only state besides the links.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/net/net_allow.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

struct dsec_sec_bpf;

namespace dsec::net {

/// One resolved kernel rule: (addr & mask(prefix)) == addr, port 0 = any.
/// The first matching rule decides; `deny` refuses (network.deny).
struct rule {
  addr16 addr{};
  int prefix = 128;
  uint16_t port = 0; ///< host byte order
  bool deny = false;
};

class policy_engine {
 public:
  /// Loads and attaches the programs. `attach_dir` is the node's v2 parent
  /// (created if missing); `sandbox_level` the depth of sandbox directories
  /// below the v2 root. Fails (naming the step and libbpf's last message)
  /// without CAP_BPF, kernel BTF or a cgroup v2 hierarchy; the node then
  /// runs without allow-lists.
  static expected<std::unique_ptr<policy_engine>> load(const std::string& attach_dir,
                                                       uint32_t sandbox_level);
  /// Detaches and unloads (the links go with the skeleton).
  ~policy_engine();

  policy_engine(const policy_engine&) = delete;
  policy_engine& operator=(const policy_engine&) = delete;

  /// Installs (or replaces) the rules of sandbox `cgroup_id`, first match
  /// deciding, and makes sure its counters exist. At most 128 rules.
  status put(uint64_t cgroup_id, const std::vector<rule>& rules);

  /// Forgets the sandbox: policy and counters.
  void erase(uint64_t cgroup_id);

  /// True if the sandbox has a policy entry (tests, diagnostics).
  bool has(uint64_t cgroup_id) const;

  /// The counters and the last denied targets, oldest first.
  denial_counts denials(uint64_t cgroup_id) const;

  /// Replaces the set of host addresses no sandbox may reach.
  status set_host_addresses(const std::vector<addr16>& addrs);

  /// Lets sandboxes that have rules reach the node's DNS resolver at
  /// `addr`:`port` (host order) although it is a host address.
  status set_dns_server(const addr16& addr, uint16_t port);

 private:
  explicit policy_engine(dsec_sec_bpf* skel) : skel_(skel) {}
  dsec_sec_bpf* skel_;
};

/// The cgroup id of a v2 directory (its inode number on cgroup2).
expected<uint64_t> cgroup_id_of(const std::string& v2_dir);

/// Every address configured on the host (the node's network namespace).
std::vector<addr16> host_addresses();

} // namespace dsec::net
