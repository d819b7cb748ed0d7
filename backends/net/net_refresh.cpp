// The node's refresh thread (see sandbox_net.hpp): every refresh_period it
// refreshes the host addresses no sandbox may reach, re-resolves the names
// whose answers expire soon, and reads every sandbox's denials so a port
// scan is reported when it happens, not when someone reads the sandbox.
//
// A pass takes the node lock twice, briefly: to collect what is due, and,
// after the upstream lookups (made with no lock held, each name once however
// many sandboxes use it), to hand the answers to the sandboxes still there.
// A sandbox released meanwhile is simply no longer in members_; a name its
// list dropped meanwhile is ignored. So a slow or silent upstream (2 s per
// query) delays only the refresh of its names: PUT .../network, creates and
// the resolver's admission of other sandboxes' queries go on.
#include <algorithm>
#include <iostream>
#include <map>

#include "backends/net/sandbox_net.hpp"

namespace dsec::net {

using steady = std::chrono::steady_clock;

bool node_net::stopping() {
  std::lock_guard<std::mutex> g(m_);
  return stop_;
}

void node_net::refresh_loop() {
  std::unique_lock<std::mutex> g(m_);
  while (!stop_) {
    wake_.wait_for(g, refresh_period, [this] { return stop_; });
    if (stop_)
      break;
    g.unlock();
    refresh_pass();
    g.lock();
  }
}

void node_net::refresh_pass() {
  auto addrs = host_addresses();
  {
    std::lock_guard<std::mutex> lg(link_m_);
    if (link_)
      addrs.push_back(v4_mapped(link_->gateway()));
  }
  (void)engine_->set_host_addresses(addrs);
  // What is due, and the port-scan watch (one counter read per sandbox).
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> g(m_);
    auto now = steady::now();
    for (auto& [cg, member] : members_) {
      std::lock_guard<std::mutex> sg(member->m_);
      for (auto& n : member->due_locked(now))
        if (std::find(names.begin(), names.end(), n) == names.end())
          names.push_back(n);
    }
    for (auto& [cg, member] : watched_)
      member->watch_for_scan();
  }
  // The lookups, with no lock held.
  std::map<std::string, sandbox_net::lookup> answers;
  for (auto& n : names) {
    if (stopping())
      return;
    answers.emplace(n, resolve_upstream(upstream_, n, sandbox_net::max_addrs_per_domain));
  }
  // The answers, to the sandboxes still here; every one re-installs its
  // rules, which drops addresses whose TTL ran out (also those learned
  // from the sandbox's own lookups, whose names may not be due).
  std::lock_guard<std::mutex> g(m_);
  for (auto& [cg, member] : members_)
    member->apply_refresh(answers);
}

std::vector<std::string> sandbox_net::due_locked(steady::time_point now) const {
  std::vector<std::string> out;
  if (released_)
    return out;
  for (auto& [domain, l] : domains_)
    if (l.next_refresh <= now)
      out.push_back(domain);
  return out;
}

void sandbox_net::apply_refresh(const std::map<std::string, lookup>& answers) {
  std::lock_guard<std::mutex> g(m_);
  if (released_)
    return;
  auto now = steady::now();
  for (auto& [domain, l] : domains_) {
    auto it = answers.find(domain);
    if (it != answers.end() && l.next_refresh <= now)
      apply_lookup(l, it->second);
  }
  // Also drops the addresses whose time ran out.
  if (auto st = install_locked(); !st)
    std::cerr << "sandbox " << id_ << ": keeping the previous network rules: "
              << st.err().message << "\n";
}

void sandbox_net::watch_for_scan() {
  (void)denials(); // observes, and logs a scan the first time
}

} // namespace dsec::net
