// name_proxy: the node's check of the NAME a sandbox connection asks for,
// for rules written as names (egress sources and domain entries) on ports
// 443 and 80. An allowed address also serves every other name hosted on it
// (CDNs, domain fronting), so an address check alone lets `evil.example`
// through a rule for `pypi.org` when both sit behind one CDN address.
//
// How: the node's nftables table redirects sandbox TCP to port 80 and 443 of
// the addresses some sandbox reaches by a named rule (the set `named`) to
// this proxy on the bridge gateway; it reads the original destination
// (SO_ORIGINAL_DST), and
//   - if the sandbox reaches that destination by an address or CIDR rule,
//     splices the bytes through unread;
//   - else reads the TLS ClientHello (443) or the HTTP request head (80),
//     takes its SNI / Host, and asks the gate whether the sandbox's named
//     rules allow that name at that address; if so it connects to the
//     original destination, replays what it read and splices; if not, or
//     if the hello has no name or is malformed, it closes the connection
//     and the gate counts a network denial ("sni NAME ip:443").
// Connections to addresses outside `named` never come here.
//
// One thread accepts; each connection gets a thread (at most max_conns;
// more are closed at once). stop() (the destructor) shuts every socket down
// and joins every thread. Nothing here runs on a CAF thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/net/listener.hpp"
#include "core/allow_list.hpp"
#include "core/error.hpp"

namespace dsec::net {

/// What the proxy asks of the node about one connection.
class name_gate {
 public:
  virtual ~name_gate() = default;
  enum class verdict { pass, check, unknown };
  /// pass: an address rule of sandbox `src` allows `dst`:`port`; check:
  /// only a named rule may; unknown: no such sandbox.
  virtual verdict route(uint32_t src, const addr16& dst, uint16_t port) = 0;
  /// Whether a named rule of `src` allows `name` at `dst`:`port`; a refusal
  /// is counted by the gate (`name` empty: the client named nothing).
  virtual bool allow_name(uint32_t src, const addr16& dst, uint16_t port,
                          const std::string& name) = 0;
};

class name_proxy {
 public:
  /// Counters, for tests and benches.
  struct counters {
    std::atomic<uint64_t> passed{0};
    std::atomic<uint64_t> checked{0};
    std::atomic<uint64_t> closed{0};
  };

  /// Listens on `addr` (network order), a port the kernel picks.
  static expected<std::unique_ptr<name_proxy>> start(uint32_t addr, name_gate* gate);
  ~name_proxy();
  name_proxy(const name_proxy&) = delete;
  name_proxy& operator=(const name_proxy&) = delete;

  uint16_t port() const { return port_; }
  /// The node's counts: every proxy of the node adds to the same set,
  /// which /metrics shows.
  const counters& stats() const { return stats_; }
  static const counters& node_stats() { return node_counters(); }

 private:
  name_proxy() = default;
  void accept_loop();
  // Connections served at once; beyond it new ones are closed (fail closed).
  static constexpr size_t max_conns = 512;
  void serve(conn_threads::conn& c);

  int listen_ = -1;
  uint16_t port_ = 0;
  name_gate* gate_ = nullptr;
  static counters& node_counters();
  counters& stats_ = node_counters();
  loop_thread loop_;
  conn_threads conns_{max_conns};
};

} // namespace dsec::net
