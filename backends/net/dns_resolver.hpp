// dns_resolver: the node's DNS server for its allow-list sandboxes, and the
// node's own upstream client. It listens on the bridge gateway, port 53,
// UDP and TCP (the only host address and port a sandbox may reach; see
// dsec_sec.bpf.c and net_link.cpp), and for each query asks its gate who
// the asking sandbox is (by source address) and whether its current rules
// allow the name:
//   - allowed: the query is relayed as it came (EDNS0 and all) to the
//     upstream with a fresh id, the answer is handed to the gate (which
//     opens the answer's addresses for the rule) and relayed back; a UDP
//     answer with TC set goes back as is, so the stub retries over TCP,
//     which is relayed over TCP;
//   - refused: a REFUSED answer, and nothing leaves the host; the gate
//     counts it as a network denial with the name;
//   - malformed, oversized, from an unknown address: dropped and counted.
//
// One thread runs a poll loop for UDP (one upstream socket per query in
// flight, at most max_inflight, each with a deadline); each TCP connection
// gets a thread of its own (at most max_tcp), with socket timeouts. Nothing
// here runs on a CAF thread. stop() (or the destructor) closes every socket
// and joins every thread.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/net/listener.hpp"
#include "core/allow_list.hpp"
#include "core/dns_packet.hpp"
#include "core/error.hpp"

namespace dsec::net {

/// What the resolver asks of the node about one query.
class dns_gate {
 public:
  virtual ~dns_gate() = default;
  enum class verdict { allow, refuse, unknown };
  /// Whether sandbox address `src` (network order) may look up `name`; a
  /// refusal is counted by the gate.
  virtual verdict admit(uint32_t src, const std::string& name) = 0;
  /// The upstream answered an admitted query of `src`.
  virtual void answered(uint32_t src, const dns::message& answer) = 0;
};

/// One address with the TTL the upstream gave it, seconds.
struct resolved_addr {
  addr16 addr{};
  uint32_t ttl = 0;
};

/// The node's upstream: --dns-upstream HOST:PORT, else the first
/// nameserver of /etc/resolv.conf (loopback ones too: the node can reach
/// them), else 127.0.0.1:53 as glibc. invalid_argument if the flag's value
/// is not IPv4:PORT.
expected<sockaddr_in> dns_upstream_address();

/// Resolves `name` through `upstream` (A and AAAA, TCP on truncation,
/// CNAME chains followed); at most `max_addrs` addresses. not_found when
/// the name has no address (NXDOMAIN, REFUSED, no records); unavailable
/// when the upstream does not answer within 2 s.
expected<std::vector<resolved_addr>> resolve_upstream(const sockaddr_in& upstream,
                                                      const std::string& name, size_t max_addrs);

/// The addresses of `name` in `answer` (following its CNAME chain, at most
/// 8 links), with the smallest TTL on the way; `chain` receives the names.
std::vector<resolved_addr> addresses_for(const dns::message& answer, const std::string& name,
                                         std::vector<std::string>* chain = nullptr);

class dns_resolver {
 public:
  /// Counters, for /metrics and tests.
  struct counters {
    std::atomic<uint64_t> forwarded{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> dropped{0}; ///< malformed, oversized or unknown source
  };

  /// Binds UDP and TCP on `addr`:`port` (network order address, host order
  /// port) and starts serving. `gate` must outlive the resolver.
  static expected<std::unique_ptr<dns_resolver>> start(uint32_t addr, uint16_t port,
                                                       sockaddr_in upstream, dns_gate* gate);
  ~dns_resolver();
  dns_resolver(const dns_resolver&) = delete;
  dns_resolver& operator=(const dns_resolver&) = delete;

  /// The node's counts: every resolver of the node (one per bridge) adds
  /// to the same set, which /metrics shows.
  const counters& stats() const { return stats_; }
  static const counters& node_stats() { return node_counters(); }

 private:
  dns_resolver() = default;
  void udp_loop();
  void tcp_conn(int fd, uint32_t src);
  /// Decides on one query; returns the bytes to answer with (may be empty
  /// = drop) or sets `forward` when it must go upstream.
  std::vector<uint8_t> decide(uint32_t src, const uint8_t* d, size_t len, bool& forward,
                              dns::message& q);

  // TCP connections served at once: enough for bursts of package
  // installs, small enough that a flood costs little (more are closed).
  static constexpr size_t max_tcp = 32;

  int udp_ = -1, tcp_ = -1;
  sockaddr_in upstream_{};
  dns_gate* gate_ = nullptr;
  static counters& node_counters();
  counters& stats_ = node_counters();
  loop_thread loop_;
  conn_threads tcp_conns_{max_tcp};
};

} // namespace dsec::net
