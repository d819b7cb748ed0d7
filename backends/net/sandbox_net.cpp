// node_net and sandbox_net (see sandbox_net.hpp): joining a sandbox, policy
// replacement, domain resolution and its periodic refresh.
#include "backends/net/sandbox_net.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>

namespace dsec::net {

namespace {

// How often domains and host addresses are re-resolved. DNS answers of
// CDNs change within minutes; 30 s keeps a sandbox's view close to the
// resolver's without measurable load (one lookup per domain per sandbox).
constexpr auto refresh_period = std::chrono::seconds(30);
// Addresses kept per domain: a name with more (large CDNs) is cut off,
// which fails closed (connects to the rest are refused).
constexpr size_t max_addrs_per_domain = 16;

expected<std::vector<addr16>> lookup(const std::string& domain) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(domain.c_str(), nullptr, &hints, &res);
  if (rc != 0)
    return invalid_argument("network.allow: cannot resolve \"" + domain + "\": "
                            + ::gai_strerror(rc));
  std::vector<addr16> out;
  for (auto* a = res; a && out.size() < max_addrs_per_domain; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      out.push_back(v4_mapped(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr));
    } else if (a->ai_family == AF_INET6) {
      addr16 v;
      std::memcpy(v.data(), &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, 16);
      out.push_back(v);
    }
  }
  ::freeaddrinfo(res);
  return out;
}

} // namespace

// -- node_net --------------------------------------------------------------------

std::shared_ptr<node_net> node_net::start(const std::string& node_id,
                                          const std::string& unified_root,
                                          const std::string& parent_rel) {
  std::shared_ptr<node_net> n{new node_net()};
  n->node_id_ = node_id;
  // Sandbox directories are <unified_root>/<parent_rel>/<id>: one level
  // deeper than the parent's components.
  uint32_t level = 2;
  for (char c : parent_rel)
    level += c == '/';
  auto v2_parent = unified_root + "/" + parent_rel;
  // DSEC_EBPF=off: the operator's switch (and the benches' baseline).
  // Without a cgroup2 mount there, make_dirs would create plain directories.
  auto off = ::getenv("DSEC_EBPF");
  auto eng = off && std::string{off} == "off"
               ? expected<std::unique_ptr<policy_engine>>(
                   unavailable("eBPF: turned off by DSEC_EBPF=off"))
             : ::access((unified_root + "/cgroup.procs").c_str(), F_OK) == 0
               ? policy_engine::load(v2_parent, level)
               : expected<std::unique_ptr<policy_engine>>(
                   unavailable("eBPF: no cgroup v2 hierarchy at " + unified_root));
  if (!eng) {
    n->ebpf_error_ = eng.err();
    std::cerr << "node " << node_id << ": network allow-lists disabled: "
              << eng.err().message << "\n";
    return n;
  }
  n->engine_ = std::move(*eng);
  n->refresher_ = std::thread([raw = n.get()] { raw->refresh_loop(); });
  return n;
}

node_net::~node_net() {
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
  }
  wake_.notify_all();
  if (refresher_.joinable())
    refresher_.join();
  link_.reset();   // bridge and nft table
  engine_.reset(); // detach and unload
}

void node_net::close_link() {
  std::lock_guard<std::mutex> g(link_m_);
  link_closed_ = true;
  link_.reset();
}

expected<node_link*> node_net::ensure_link() {
  std::lock_guard<std::mutex> g(link_m_);
  if (link_closed_)
    return unavailable("network of node " + node_id_ + ": shut down");
  if (!link_) {
    auto l = node_link::open(node_id_);
    if (!l)
      return l.err();
    link_ = std::move(*l);
    if (engine_) {
      // The bridge address is the host too; refresh the deny set at once.
      auto addrs = host_addresses();
      addrs.push_back(v4_mapped(link_->gateway()));
      (void)engine_->set_host_addresses(addrs);
    }
  }
  return link_.get();
}

expected<std::vector<rule>> node_net::resolve(const std::vector<allow_entry>& entries) const {
  std::vector<rule> out;
  for (auto& e : entries) {
    if (e.domain.empty()) {
      out.push_back({e.addr, e.prefix, e.port});
      continue;
    }
    auto addrs = lookup(e.domain);
    if (!addrs)
      return addrs.err();
    for (auto& a : *addrs)
      out.push_back({a, 128, e.port});
  }
  // DNS goes to the nameservers named in the sandbox's /etc/resolv.conf
  // (the host's, written at link time) and nowhere else.
  if (!entries.empty())
    for (auto ns : host_nameservers())
      out.push_back({v4_mapped(ns), 128, 53});
  return out;
}

expected<std::unique_ptr<sandbox_net>> node_net::join(const std::string& id,
                                                      const std::string& v2_dir, pid_t init_pid,
                                                      const network_policy& policy) {
  if (!engine_ || v2_dir.empty()) {
    if (!policy.allow.empty())
      return invalid_argument("create " + id + ": network.allow needs eBPF on this node, which "
                              "is unavailable: " + (engine_ ? "the sandbox has no cgroup v2 "
                              "directory" : ebpf_error_.message));
    // Mode none without eBPF: the empty namespace is the whole policy.
    return std::unique_ptr<sandbox_net>(new sandbox_net(shared_from_this(), id, 0, init_pid));
  }
  auto cg = cgroup_id_of(v2_dir);
  if (!cg)
    return cg.err();
  std::unique_ptr<sandbox_net> sn{new sandbox_net(shared_from_this(), id, *cg, init_pid)};
  auto made = sn->set(policy);
  if (!made)
    return made.err(); // sn's destructor removes what set() made
  return sn;
}

void node_net::refresh_loop() {
  std::unique_lock<std::mutex> g(m_);
  while (!stop_) {
    wake_.wait_for(g, refresh_period, [this] { return stop_; });
    if (stop_)
      break;
    auto addrs = host_addresses();
    {
      std::lock_guard<std::mutex> lg(link_m_);
      if (link_)
        addrs.push_back(v4_mapped(link_->gateway()));
    }
    (void)engine_->set_host_addresses(addrs);
    for (auto& [cg, member] : members_)
      member->refresh();
  }
}

// -- sandbox_net -------------------------------------------------------------------

std::string sandbox_net::resolv_conf() {
  std::string out;
  for (auto ns : host_nameservers()) {
    char buf[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &ns, buf, sizeof(buf)))
      out += std::string{"nameserver "} + buf + "\n";
  }
  return out;
}

expected<bool> sandbox_net::set(const network_policy& policy) {
  auto entries = parse_allow_list(policy.allow);
  if (!entries)
    return entries.err();
  if (!node_->engine_ || cg_ == 0) {
    if (!policy.allow.empty())
      return invalid_argument("set network of " + id_ + ": network.allow needs eBPF on this "
                              "node, which is unavailable: "
                              + (node_->engine_ ? std::string{"no cgroup v2 directory"}
                                                : node_->ebpf_error_.message));
    return false;
  }
  bool has_domain = false;
  for (auto& e : *entries)
    has_domain |= !e.domain.empty();
  // Domain sandboxes join the refresh list (node lock first, see header;
  // under both locks, so a concurrent release() cannot leave it there).
  {
    std::lock_guard<std::mutex> ng(node_->m_);
    std::lock_guard<std::mutex> g(m_);
    if (released_)
      return unavailable("set network of " + id_ + ": sandbox destroyed");
    if (has_domain)
      node_->members_[cg_] = this;
    else
      node_->members_.erase(cg_);
  }
  std::lock_guard<std::mutex> g(m_);
  if (released_)
    return unavailable("set network of " + id_ + ": sandbox destroyed");
  bool made_link = false;
  if (!entries->empty() && link_.index < 0) {
    auto nl = node_->ensure_link();
    if (!nl)
      return nl.err();
    auto l = (*nl)->attach(id_, pid_);
    if (!l)
      return l.err();
    link_ = *l;
    made_link = true;
  }
  auto old = std::move(entries_);
  entries_ = std::move(*entries);
  if (auto st = install_locked(); !st) {
    entries_ = std::move(old);
    return st.err();
  }
  return made_link;
}

status sandbox_net::install_locked() {
  auto rules = node_->resolve(entries_);
  if (!rules)
    return rules.err();
  if (auto st = node_->engine_->put(cg_, *rules); !st)
    return st;
  installed_ = std::move(*rules);
  return {};
}

void sandbox_net::refresh() {
  std::lock_guard<std::mutex> g(m_);
  if (released_)
    return;
  if (auto st = install_locked(); !st)
    std::cerr << "sandbox " << id_ << ": keeping the previous network rules: "
              << st.err().message << "\n";
}

denial_counts sandbox_net::denials() const {
  if (!node_->engine_ || cg_ == 0)
    return {};
  return node_->engine_->denials(cg_);
}

void sandbox_net::release() {
  std::unique_lock<std::mutex> ng(node_->m_, std::defer_lock);
  if (node_->engine_ && cg_)
    ng.lock();
  std::lock_guard<std::mutex> g(m_);
  if (released_)
    return;
  released_ = true;
  if (ng.owns_lock()) {
    node_->members_.erase(cg_);
    ng.unlock();
    node_->engine_->erase(cg_);
  }
  std::lock_guard<std::mutex> lg(node_->link_m_);
  if (link_.index >= 0 && node_->link_)
    node_->link_->detach(link_);
}

} // namespace dsec::net
