// Bridge, veth and nftables plumbing of allow-list sandboxes (see
// net_link.hpp), through the `ip` and `nft` commands.
#include "backends/net/net_link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "sys/fd.hpp"
#include "sys/process.hpp"

namespace dsec::net {

namespace {

constexpr uint32_t pool_base = 0x64400000; // 100.64.0.0/10, host order
constexpr int subnet_bits = 20;
constexpr int subnets = 1 << (subnet_bits - 10); // /20s in the /10
constexpr int slots = 1 << (32 - subnet_bits);   // addresses in a /20

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s)
    h = (h ^ c) * 16777619u;
  return h;
}

std::string ip4(uint32_t be) {
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &be, buf, sizeof(buf)) ? buf : "?";
}

// IPv4 routes of the host as (destination, mask), network order.
std::vector<std::pair<uint32_t, uint32_t>> host_routes() {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  std::ifstream f("/proc/net/route");
  std::string line;
  std::getline(f, line); // header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string iface, dest, gw, flags, refcnt, use, metric, mask;
    if (in >> iface >> dest >> gw >> flags >> refcnt >> use >> metric >> mask)
      out.emplace_back(static_cast<uint32_t>(std::stoul(dest, nullptr, 16)),
                       static_cast<uint32_t>(std::stoul(mask, nullptr, 16)));
  }
  return out;
}

bool overlaps(uint32_t be_net, uint32_t be_mask,
              const std::vector<std::pair<uint32_t, uint32_t>>& routes) {
  for (auto& [dst, mask] : routes) {
    if (mask == 0)
      continue; // the default route overlaps everything
    uint32_t m = be_mask & mask;
    if ((be_net & m) == (dst & m))
      return true;
  }
  return false;
}

std::string nft_ruleset(const std::string& table, const std::string& bridge, uint32_t subnet) {
  auto net = ip4(subnet) + "/" + std::to_string(subnet_bits);
  // input: a sandbox never reaches the host itself (REST, native, gossip
  // ports, anything else listening), whatever its allow-list says; the eBPF
  // programs refuse it earlier, this is the second wall.
  // The one exception: the node's DNS resolver on the gateway, port 53.
  auto gw = ip4(htonl(ntohl(subnet) + 1));
  return "table ip " + table + " {\n"
         "  chain input { type filter hook input priority -10; policy accept;\n"
         "    iifname \"" + bridge + "\" ip daddr " + gw + " udp dport 53 accept\n"
         "    iifname \"" + bridge + "\" ip daddr " + gw + " tcp dport 53 accept\n"
         "    iifname \"" + bridge + "\" drop\n  }\n"
         "  chain forward { type filter hook forward priority -10; policy accept;\n"
         "    iifname \"" + bridge + "\" oifname \"" + bridge + "\" drop\n"
         "    iifname \"" + bridge + "\" accept\n"
         "    oifname \"" + bridge + "\" ct state established,related accept\n"
         "    oifname \"" + bridge + "\" drop\n  }\n"
         "  chain postrouting { type nat hook postrouting priority 100; policy accept;\n"
         "    ip saddr " + net + " oifname != \"" + bridge + "\" masquerade\n  }\n"
         // Addresses some sandbox reaches by a named rule: their web ports go
         // through the node's name check (name_proxy.hpp; rule added with
         // its port by redirect_named).
         "  set named { type ipv4_addr; }\n"
         "  chain prerouting { type nat hook prerouting priority -100; policy accept; }\n"
         "}\n";
}

} // namespace

std::vector<uint32_t> host_nameservers() {
  std::vector<uint32_t> out;
  std::ifstream f("/etc/resolv.conf");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key, value;
    in_addr a{};
    if (in >> key >> value && key == "nameserver" && inet_pton(AF_INET, value.c_str(), &a) == 1
        && (ntohl(a.s_addr) >> 24) != 127)
      out.push_back(a.s_addr);
  }
  return out;
}

uint32_t node_link::gateway() const { return htonl(ntohl(subnet_) + 1); }

expected<std::unique_ptr<node_link>> node_link::open(const std::string& node_id) {
  std::unique_ptr<node_link> l{new node_link()};
  uint32_t h = fnv1a(node_id);
  char tag[8];
  std::snprintf(tag, sizeof(tag), "%06x", h & 0xffffff);
  l->tag_ = tag;
  l->bridge_ = "ds" + l->tag_ + "br";
  l->table_ = "dsec_" + l->tag_;
  // Leftovers of a previous run of this node id (it died without teardown).
  (void)sys::run_checked({"ip", "link", "del", l->bridge_});
  (void)sys::run_checked({"nft", "delete", "table", "ip", l->table_});
  auto routes = host_routes();
  uint32_t mask = htonl(~0u << (32 - subnet_bits));
  int start = static_cast<int>(h % subnets);
  for (int i = 0; i < subnets && !l->subnet_; ++i) {
    uint32_t net = htonl(pool_base + uint32_t((start + i) % subnets) * slots);
    if (!overlaps(net, mask, routes))
      l->subnet_ = net;
  }
  if (!l->subnet_)
    return unavailable("node network: no free /20 in 100.64.0.0/10");
  l->used_.assign(slots, false);
  l->used_[0] = l->used_[1] = l->used_[slots - 1] = true; // network, gateway, broadcast
  auto gw = ip4(l->gateway()) + "/" + std::to_string(subnet_bits);
  if (auto st = sys::run_checked({"ip", "-b", "-"},
                            "link add " + l->bridge_ + " type bridge\n"
                            "addr add " + gw + " dev " + l->bridge_ + "\n"
                            "link set " + l->bridge_ + " up\n");
      !st) {
    (void)sys::run_checked({"ip", "link", "del", l->bridge_});
    return unavailable("node network: " + st.err().message);
  }
  if (auto st = sys::run_checked({"nft", "-f", "-"}, nft_ruleset(l->table_, l->bridge_, l->subnet_));
      !st) {
    (void)sys::run_checked({"ip", "link", "del", l->bridge_});
    return unavailable("node network: " + st.err().message);
  }
  // NAT needs forwarding; it is host-wide and stays on after the node (other
  // nodes on the host may rely on it).
  std::ofstream fwd("/proc/sys/net/ipv4/ip_forward");
  fwd << "1\n";
  fwd.flush();
  if (!fwd) {
    (void)sys::run_checked({"nft", "delete", "table", "ip", l->table_});
    (void)sys::run_checked({"ip", "link", "del", l->bridge_});
    return unavailable("node network: cannot enable /proc/sys/net/ipv4/ip_forward");
  }
  return l;
}

node_link::~node_link() {
  (void)sys::run_checked({"nft", "delete", "table", "ip", table_});
  // The veths of sandboxes that just died go with their network namespaces,
  // asynchronously; until then the bridge may refuse to go (EBUSY). Retry
  // for up to a second, stopping once the link is gone.
  for (int i = 0; i < 20; ++i) {
    if (sys::run_checked({"ip", "link", "del", bridge_}))
      return;
    if (!sys::run_checked({"ip", "link", "show", bridge_}))
      return; // already gone
    ::usleep(50 * 1000);
  }
}

expected<sandbox_link> node_link::attach(const std::string& sandbox_id, pid_t init_pid) {
  sandbox_link l;
  {
    std::lock_guard<std::mutex> g(m_);
    for (int i = 2; i < slots - 1; ++i)
      if (!used_[i]) {
        used_[i] = true;
        l.index = i;
        break;
      }
  }
  if (l.index < 0)
    return error{errc::resource_exhausted,
                 "network of " + sandbox_id + ": all " + std::to_string(slots - 3)
                   + " addresses of the node's subnet are in use"};
  l.addr = htonl(ntohl(subnet_) + uint32_t(l.index));
  l.host_if = "ds" + tag_ + "." + std::to_string(l.index);
  auto pid = std::to_string(init_pid);
  auto st = sys::run_checked({"ip", "-b", "-"},
                        "link add " + l.host_if + " type veth peer name eth0 netns " + pid + "\n"
                        "link set " + l.host_if + " master " + bridge_ + "\n"
                        "link set dev " + l.host_if + " type bridge_slave isolated on\n"
                        "link set " + l.host_if + " up\n");
  // SAFETY: nsenter joins only the sandbox's net namespace (not its mount or
  // pid namespace), so `ip` is the host's binary with the host's files.
  if (st)
    st = sys::run_checked({"nsenter", "--net=/proc/" + pid + "/ns/net", "ip", "-b", "-"},
                     "addr add " + ip4(l.addr) + "/" + std::to_string(subnet_bits) + " dev eth0\n"
                     "link set eth0 up\n"
                     "route add default via " + ip4(gateway()) + "\n");
  if (!st) {
    detach(l);
    return internal_error("network of " + sandbox_id + ": " + st.err().message);
  }
  return l;
}

void node_link::detach(sandbox_link& l) {
  if (l.index < 0)
    return;
  // Deleting one end deletes the pair; if the sandbox's namespace died first
  // the pair is already gone.
  (void)sys::run_checked({"ip", "link", "del", l.host_if});
  std::lock_guard<std::mutex> g(m_);
  used_[l.index] = false;
  l.index = -1;
}

status node_link::redirect_named(uint16_t port) {
  auto gw = ip4(gateway());
  auto p = std::to_string(port);
  return sys::run_checked({"nft", "-f", "-"},
                          "insert rule ip " + table_ + " input iifname \"" + bridge_
                            + "\" ip daddr " + gw + " tcp dport " + p + " accept\n"
                            "add rule ip " + table_ + " prerouting iifname \"" + bridge_
                            + "\" ip daddr @named tcp dport { 80, 443 } redirect to :" + p + "\n"
                            // QUIC would carry its SNI past the check: dropped, so
                            // clients fall back to TCP, which is checked.
                            "insert rule ip " + table_ + " forward iifname \"" + bridge_
                            + "\" ip daddr @named udp dport { 80, 443 } drop\n");
}

void node_link::add_named(const std::vector<uint32_t>& addrs) {
  std::string elems;
  {
    std::lock_guard<std::mutex> g(m_);
    for (auto a : addrs)
      if (named_.insert(a).second)
        elems += (elems.empty() ? "" : ", ") + ip4(a);
  }
  if (elems.empty())
    return;
  if (auto st = sys::run_checked({"nft", "add", "element", "ip", table_, "named", "{ " + elems + " }"});
      !st)
    std::cerr << "node network: name check set: " << st.err().message << "\n";
}

} // namespace dsec::net
