// Network policy and denial counters of container sandboxes: the create()
// and recover() steps and container_sandbox::set_network()/denials(). The
// mechanisms live in backends/net; this file only ties them to a sandbox.
#include "backends/container/container_net.hpp"

#include <iostream>

#include "core/deny_list.hpp"

namespace dsec::backends {

namespace {

// The sandbox resolves names through the node's resolver, the only DNS
// server its policy lets it reach (backends/net/dns_resolver.hpp). A
// protected (read-only) /etc keeps the layer's file; DNS then may not work,
// but nothing else is affected.
void write_resolv_conf(const net::sandbox_net& sn, int root, const std::string& id) {
  auto conf = sn.resolv_conf();
  if (conf.empty())
    return;
  if (auto st = write_in_root(root, "/etc/resolv.conf", conf, 0644); !st)
    std::cerr << "sandbox " << id << ": /etc/resolv.conf not written: " << st.err().message
              << "\n";
}

} // namespace

status check_network(const net::node_net& net, const std::string& id,
                     const network_policy& policy) {
  if (auto entries = net::parse_allow_list(policy.allow); !entries)
    return invalid_argument("create " + id + ": " + entries.err().message);
  if (auto deny = net::parse_deny_list(policy.deny); !deny)
    return invalid_argument("create " + id + ": " + deny.err().message);
  if (!policy.allow.empty() && net.ebpf_error())
    return invalid_argument("create " + id + ": network.allow needs eBPF on this node, which is "
                            "unavailable: " + net.ebpf_error().message);
  return {};
}

status join_network(net::node_net& net, const std::string& id, const network_policy& policy,
                    sandbox_parts& parts, sys::cleanup_stack* undo) {
  auto v2 = parts.cgroup ? parts.cgroup->unified_path() : std::string{};
  auto joined = net.join(id, v2, parts.pid, policy);
  if (!joined)
    return joined.err();
  parts.net = std::move(*joined);
  if (undo)
    undo->push([n = parts.net.get()] { n->release(); });
  if (parts.net->link().index >= 0 && parts.rootfs)
    write_resolv_conf(*parts.net, parts.rootfs.get(), id);
  return {};
}

status container_sandbox::set_network(const network_policy& policy) {
  if (channel_->is_shut())
    return unavailable("set network of " + parts_.id + ": sandbox destroyed");
  auto root = root_fd();
  if (!parts_.net)
    return unavailable("set network of " + parts_.id + ": sandbox has no network state");
  auto made = parts_.net->set(policy);
  if (!made)
    return made.err();
  if (*made && root && *root)
    write_resolv_conf(*parts_.net, root->get(), parts_.id);
  return {};
}

denial_counts container_sandbox::denials() {
  return parts_.net ? parts_.net->denials() : denial_counts{};
}

} // namespace dsec::backends
