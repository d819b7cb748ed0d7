// node_net and sandbox_net (see sandbox_net.hpp): joining a sandbox, policy
// replacement, domain resolution and its periodic refresh.
#include "backends/net/sandbox_net.hpp"
#include "backends/net/deny_list.hpp"
#include "core/deny_list.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <optional>

namespace dsec::net {

namespace {

using steady = std::chrono::steady_clock;

constexpr auto refresh_period = node_net::refresh_period;
// Bounds on how long a resolved address opens a rule: an upstream TTL of 0
// would make every connect race the refresh (and every sandbox ask the
// upstream every tick: 3,200 sandboxes x 2 queries per name per 5 s), one
// of days would keep an address a CDN moved away from.
constexpr auto min_ttl = std::chrono::seconds(30);
constexpr auto max_ttl = std::chrono::seconds(300);
// Retry of a name that resolved to nothing.
constexpr auto retry_unresolved = std::chrono::seconds(10);
constexpr size_t max_addrs_per_domain = sandbox_net::max_addrs_per_domain;
// Kernel rules per sandbox (sec_maps.h DSEC_MAX_RULES).
constexpr size_t max_rules = 128;

steady::time_point expiry(uint32_t ttl_s) {
  auto ttl = std::chrono::seconds(ttl_s);
  return steady::now() + std::min<std::chrono::seconds>(std::max<std::chrono::seconds>(ttl, min_ttl), max_ttl);
}

std::string ip4(uint32_t be) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &be, buf, sizeof(buf));
  return buf;
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
  if (auto up = dns_upstream_address())
    n->upstream_ = *up;
  else
    n->upstream_error_ = up.err();
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
  resolver_.reset(); // its thread asks us: gone before the rest
  proxy_.reset();
  link_.reset();     // bridge and nft table
  engine_.reset();   // detach and unload
}

void node_net::close_link() {
  std::lock_guard<std::mutex> g(link_m_);
  link_closed_ = true;
  resolver_.reset();
  proxy_.reset();
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
    if (upstream_error_)
      return unavailable("node network: " + upstream_error_.message);
    auto r = dns_resolver::start((*l)->gateway(), 53, upstream_, this);
    if (!r)
      return r.err();
    auto px = name_proxy::start((*l)->gateway(), this);
    if (!px)
      return px.err();
    if (auto st = (*l)->redirect_named((*px)->port()); !st)
      return unavailable("node network: name check: " + st.err().message);
    link_ = std::move(*l);
    resolver_ = std::move(*r);
    proxy_ = std::move(*px);
    if (engine_) {
      // The bridge address is the host too; refresh the deny set at once.
      auto addrs = host_addresses();
      addrs.push_back(v4_mapped(link_->gateway()));
      (void)engine_->set_host_addresses(addrs);
      if (auto st = engine_->set_dns_server(v4_mapped(link_->gateway()), 53); !st)
        return st.err();
    }
  }
  return link_.get();
}

dns_gate::verdict node_net::admit(uint32_t src, const std::string& name) {
  std::lock_guard<std::mutex> g(m_);
  auto it = by_addr_.find(src);
  if (it == by_addr_.end())
    return dns_gate::verdict::unknown;
  auto* sn = it->second;
  {
    std::lock_guard<std::mutex> sg(sn->m_);
    if (sn->name_allowed_locked(name))
      return dns_gate::verdict::allow;
  }
  sn->count_dns_denial(name);
  return dns_gate::verdict::refuse;
}

void node_net::answered(uint32_t src, const dns::message& answer) {
  if (answer.questions.empty())
    return;
  std::lock_guard<std::mutex> g(m_);
  auto it = by_addr_.find(src);
  if (it == by_addr_.end())
    return;
  auto* sn = it->second;
  std::lock_guard<std::mutex> sg(sn->m_);
  if (sn->released_)
    return;
  auto& qname = answer.questions[0].name;
  bool changed = false;
  for (auto& [domain, l] : sn->domains_)
    if (domain == qname || std::count(l.chain.begin(), l.chain.end(), qname))
      changed |= sn->learn_locked(domain, qname, answer);
  if (changed)
    if (auto st = sn->install_locked(); !st)
      std::cerr << "sandbox " << sn->id_ << ": rules after a DNS answer not installed: "
                << st.err().message << "\n";
}

namespace {

bool rule_matches(const allow_entry& e, const addr16& a, uint16_t port) {
  if (e.port != 0 && e.port != port)
    return false;
  for (int bit = 0; bit < e.prefix; ++bit) {
    uint8_t m = uint8_t(0x80 >> (bit % 8));
    if ((a[bit / 8] & m) != (e.addr[bit / 8] & m))
      return false;
  }
  return true;
}

} // namespace

name_gate::verdict node_net::route(uint32_t src, const addr16& dst, uint16_t port) {
  std::lock_guard<std::mutex> g(m_);
  auto it = by_addr_.find(src);
  if (it == by_addr_.end())
    return name_gate::verdict::unknown;
  auto* sn = it->second;
  std::lock_guard<std::mutex> sg(sn->m_);
  if (sn->released_)
    return name_gate::verdict::unknown;
  for (auto& e : sn->entries_)
    if (e.domain.empty() && rule_matches(e, dst, port))
      return name_gate::verdict::pass;
  return name_gate::verdict::check;
}

bool node_net::allow_name(uint32_t src, const addr16& dst, uint16_t port,
                          const std::string& name) {
  std::lock_guard<std::mutex> g(m_);
  auto it = by_addr_.find(src);
  if (it == by_addr_.end())
    return false;
  auto* sn = it->second;
  {
    std::lock_guard<std::mutex> sg(sn->m_);
    if (sn->released_)
      return false;
    for (auto& e : sn->entries_) {
      if (e.domain.empty() || (e.port != 0 && e.port != port))
        continue;
      auto d = sn->domains_.find(e.domain);
      if (d == sn->domains_.end())
        continue;
      bool at = std::any_of(d->second.addrs.begin(), d->second.addrs.end(),
                            [&](auto& x) { return x.first == dst; });
      bool named = name == e.domain || std::count(d->second.chain.begin(),
                                                  d->second.chain.end(), name);
      if (at && named)
        return true;
    }
  }
  sn->count_denial(std::string{port == 443 ? "sni " : "host "}
                   + (name.empty() ? "(none)" : name.substr(0, 120)) + " "
                   + format_addr(dst) + ":" + std::to_string(port));
  return false;
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

// -- sandbox_net -------------------------------------------------------------------

std::string sandbox_net::resolv_conf() const {
  std::lock_guard<std::mutex> g(node_->link_m_);
  if (!node_->link_ || link_.index < 0)
    return "";
  return "nameserver " + ip4(node_->link_->gateway()) + "\noptions edns0\n";
}

expected<bool> sandbox_net::set(const network_policy& policy) {
  auto sourced = parse_allow_list_sourced(policy.allow);
  if (!sourced)
    return sourced.err();
  auto deny = parse_deny_list(policy.deny);
  if (!deny)
    return deny.err();
  auto entries = std::make_optional<std::vector<allow_entry>>();
  std::vector<std::string> sources;
  for (auto& s : *sourced) {
    entries->push_back(std::move(s.entry));
    sources.push_back(std::move(s.source));
  }
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
  // Names new to the list are looked up now, before any lock is taken: a
  // slow upstream delays this call only (the caller is off the actors'
  // threads), never the resolver or another sandbox's change.
  std::map<std::string, lookup> looked_up;
  {
    std::vector<std::string> fresh;
    {
      std::lock_guard<std::mutex> g(m_);
      for (auto& e : *entries)
        if (!e.domain.empty() && !domains_.count(e.domain)
            && std::find(fresh.begin(), fresh.end(), e.domain) == fresh.end())
          fresh.push_back(e.domain);
    }
    for (auto& d : fresh)
      looked_up.emplace(d, resolve_upstream(node_->upstream_, d, max_addrs_per_domain));
  }
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
    node_->watched_[cg_] = this;
  }
  bool made_link = false;
  {
    std::lock_guard<std::mutex> g(m_);
    if (released_)
      return unavailable("set network of " + id_ + ": sandbox destroyed");
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
    // Names new to the list are resolved now; names gone are forgotten.
    std::map<std::string, learned> domains;
    for (auto& e : *entries) {
      if (e.domain.empty() || domains.count(e.domain))
        continue;
      auto it = domains_.find(e.domain);
      if (it != domains_.end()) {
        domains[e.domain] = std::move(it->second);
        continue;
      }
      auto got = looked_up.find(e.domain);
      // A name another set() added meanwhile is here without a lookup:
      // the sandbox's lookups and the refresh fill it in.
      if (got != looked_up.end())
        apply_lookup(domains[e.domain], got->second);
      else
        domains[e.domain].next_refresh = steady::now();
    }
    auto old = std::move(entries_);
    auto old_sources = std::move(sources_);
    auto old_domains = std::move(domains_);
    auto old_deny = std::move(deny_);
    entries_ = std::move(*entries);
    sources_ = std::move(sources);
    domains_ = std::move(domains);
    deny_ = std::move(*deny);
    if (auto st = install_locked(); !st) {
      entries_ = std::move(old);
      sources_ = std::move(old_sources);
      domains_ = std::move(old_domains);
      deny_ = std::move(old_deny);
      return st.err();
    }
  }
  if (made_link) {
    std::lock_guard<std::mutex> ng(node_->m_);
    std::lock_guard<std::mutex> g(m_);
    if (!released_)
      node_->by_addr_[link_.addr] = this;
  }
  return made_link;
}

void sandbox_net::apply_lookup(learned& l, const lookup& addrs) {
  if (!addrs) {
    l.error = addrs.err().message;
    l.next_refresh = steady::now() + retry_unresolved;
    return;
  }
  l.error.clear();
  auto soonest = steady::time_point::max();
  for (auto& a : *addrs) {
    auto until = expiry(a.ttl);
    soonest = std::min(soonest, until);
    auto it = std::find_if(l.addrs.begin(), l.addrs.end(),
                           [&](auto& x) { return x.first == a.addr; });
    if (it != l.addrs.end())
      it->second = std::max(it->second, until);
    else if (l.addrs.size() < max_addrs_per_domain)
      l.addrs.emplace_back(a.addr, until);
  }
  // Re-resolve two ticks before the first address lapses.
  l.next_refresh = soonest - 2 * refresh_period;
}

bool sandbox_net::learn_locked(const std::string& domain, const std::string& qname,
                               const dns::message& answer) {
  auto& l = domains_[domain];
  std::vector<std::string> chain;
  auto addrs = addresses_for(answer, qname, &chain);
  for (auto& c : chain)
    if (!std::count(l.chain.begin(), l.chain.end(), c) && l.chain.size() < 16)
      l.chain.push_back(c);
  bool changed = false;
  for (auto& a : addrs) {
    auto until = expiry(a.ttl);
    auto it = std::find_if(l.addrs.begin(), l.addrs.end(),
                           [&](auto& x) { return x.first == a.addr; });
    if (it != l.addrs.end()) {
      it->second = std::max(it->second, until);
    } else if (l.addrs.size() < max_addrs_per_domain) {
      l.addrs.emplace_back(a.addr, until);
      changed = true;
    }
  }
  if (!addrs.empty())
    l.error.clear();
  return changed;
}

bool sandbox_net::name_allowed_locked(const std::string& name) const {
  if (released_)
    return false;
  // Rules that reach every IPv4 or IPv6 address (0.0.0.0/0, ::/0: E2B's
  // allow_internet_access, layer builds) resolve any name: such a sandbox
  // can send its data anywhere, so a closed resolver would only break it.
  for (auto& e : entries_)
    if (e.domain.empty() && (e.prefix == 0 || (e.prefix == 96 && e.addr[10] == 0xff
                                                && e.addr[11] == 0xff)))
      return true;
  for (auto& [domain, l] : domains_)
    if (domain == name || std::count(l.chain.begin(), l.chain.end(), name))
      return true;
  return false;
}

void sandbox_net::count_dns_denial(const std::string& name) {
  count_denial("dns " + name.substr(0, 120));
}

void sandbox_net::count_denial(std::string text) {
  std::lock_guard<std::mutex> g(m_);
  ++dns_denied_;
  dns_recent_.push_back(std::move(text));
  if (dns_recent_.size() > 16)
    dns_recent_.erase(dns_recent_.begin());
}

status sandbox_net::install_locked() {
  // First match decides: narrow allows, denies, catch-alls (deny_list.hpp).
  std::vector<rule> rules, deny, catch_all;
  for (auto& e : deny_)
    deny.push_back(deny_rule(e));
  auto now = steady::now();
  for (auto& e : entries_) {
    if (e.domain.empty()) {
      (is_catch_all(e) ? catch_all : rules).push_back({e.addr, e.prefix, e.port});
      continue;
    }
    auto it = domains_.find(e.domain);
    if (it == domains_.end())
      continue;
    auto& addrs = it->second.addrs;
    addrs.erase(std::remove_if(addrs.begin(), addrs.end(),
                               [&](auto& a) { return a.second <= now; }),
                addrs.end());
    for (auto& a : addrs)
      rules.push_back({a.first, 128, e.port});
  }
  // More than the kernel holds: the rest stays closed (fail closed).
  auto ordered = ordered_rules(std::move(rules), deny, catch_all, max_rules);
  if (!ordered)
    return ordered.err();
  rules = std::move(*ordered);
  // Addresses of named rules on the web ports go through the name check.
  std::vector<uint32_t> named;
  for (auto& e : entries_) {
    if (e.domain.empty() || (e.port != 0 && e.port != 80 && e.port != 443))
      continue;
    auto it = domains_.find(e.domain);
    if (it == domains_.end())
      continue;
    for (auto& a : it->second.addrs)
      if (a.first[10] == 0xff && a.first[11] == 0xff
          && std::all_of(a.first.begin(), a.first.begin() + 10, [](uint8_t b) { return !b; })) {
        uint32_t v4;
        std::memcpy(&v4, a.first.data() + 12, 4);
        named.push_back(v4);
      }
  }
  if (!named.empty()) {
    std::lock_guard<std::mutex> lg(node_->link_m_);
    if (node_->link_)
      node_->link_->add_named(named);
  }
  if (auto st = node_->engine_->put(cg_, rules); !st)
    return st;
  installed_ = std::move(rules);
  return {};
}

denial_counts sandbox_net::denials() const {
  if (!node_->engine_ || cg_ == 0)
    return {};
  auto out = node_->engine_->denials(cg_);
  std::lock_guard<std::mutex> g(m_);
  out.network += dns_denied_;
  out.recent.insert(out.recent.end(), dns_recent_.begin(), dns_recent_.end());
  if (out.recent.size() > 16)
    out.recent.erase(out.recent.begin(), out.recent.end() - 16);
  // Names that resolve to nothing now (their rules open nothing) come
  // last, always kept: "unresolved NAME:PORT (source S): why".
  std::vector<std::string> unresolved;
  for (size_t i = 0; i < entries_.size(); ++i) {
    auto& e = entries_[i];
    if (e.domain.empty())
      continue;
    auto it = domains_.find(e.domain);
    if (it == domains_.end() || !it->second.addrs.empty())
      continue;
    std::string src = i < sources_.size() ? sources_[i] : std::string{};
    auto text = "unresolved " + e.domain + ":" + (e.port ? std::to_string(e.port) : "*")
                + (src.empty() ? "" : " (source " + src + ")") + ": "
                + (it->second.error.empty() ? "no address" : it->second.error);
    if (!std::count(unresolved.begin(), unresolved.end(), text) && unresolved.size() < 8)
      unresolved.push_back(text);
  }
  if (out.recent.size() + unresolved.size() > 16)
    out.recent.erase(out.recent.begin(),
                     out.recent.begin() + long(out.recent.size() + unresolved.size() - 16));
  out.recent.insert(out.recent.end(), unresolved.begin(), unresolved.end());
  // The port-scan watch sees every read; the refresh thread reads too, so
  // a scan is reported whether or not anyone reads the sandbox.
  if (observe_port_scan(scan_, out))
    std::cerr << "node " << node_->node_id_ << ": sandbox " << id_ << ": " << out.recent.front()
              << "\n";
  return out;
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
    node_->watched_.erase(cg_);
    auto it = node_->by_addr_.find(link_.addr);
    if (it != node_->by_addr_.end() && it->second == this)
      node_->by_addr_.erase(it);
    ng.unlock();
    node_->engine_->erase(cg_);
  }
  std::lock_guard<std::mutex> lg(node_->link_m_);
  if (link_.index >= 0 && node_->link_)
    node_->link_->detach(link_);
}

} // namespace dsec::net
