// The node's DNS server and upstream client (see dns_resolver.hpp).
#include "backends/net/dns_resolver.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/egress_sources.hpp"

namespace dsec::net {

namespace {

using clock_type = std::chrono::steady_clock;

// Queries in flight over UDP: enough for bursts of package installs, small
// enough that a flood costs little.
constexpr size_t max_inflight = 256;
// How long an upstream has to answer; a stub resolver retries after 5 s.
constexpr auto upstream_timeout = std::chrono::seconds(2);
constexpr int tcp_timeout_s = 5;

struct pending {
  int fd = -1;
  sockaddr_in client{};
  uint16_t orig_id = 0, new_id = 0;
  uint32_t src = 0;
  dns::question q;
  clock_type::time_point deadline;
};

// One length-prefixed message over TCP (RFC 1035 4.2.2).
bool read_tcp_msg(int fd, std::vector<uint8_t>& out) {
  uint8_t l[2];
  if (!read_full(fd, l, 2))
    return false;
  out.resize(size_t(l[0]) << 8 | l[1]);
  return read_full(fd, out.data(), out.size());
}

bool write_tcp_msg(int fd, const std::vector<uint8_t>& m) {
  if (m.size() > dns::max_packet)
    return false;
  std::vector<uint8_t> buf{uint8_t(m.size() >> 8), uint8_t(m.size() & 0xff)};
  buf.insert(buf.end(), m.begin(), m.end());
  return write_all(fd, buf.data(), buf.size());
}

void set_id(std::vector<uint8_t>& m, uint16_t id) {
  m[0] = id >> 8;
  m[1] = id & 0xff;
}

// An upstream answer to our query `id` about `q`, or an error.
expected<dns::message> check_answer(const std::vector<uint8_t>& a, uint16_t id,
                                    const dns::question& q) {
  auto m = dns::parse(a.data(), a.size());
  if (!m)
    return m.err();
  if (!m->is_response() || m->id != id || m->questions.size() != 1
      || m->questions[0].name != q.name || m->questions[0].type != q.type)
    return invalid_argument("dns: upstream answer does not match the query");
  return m;
}

// Asks `upstream` over TCP; the answer or an error.
expected<std::vector<uint8_t>> ask_tcp(const sockaddr_in& upstream, std::vector<uint8_t> query) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unavailable("dns: socket: " + std::string{strerror(errno)});
  set_timeouts(fd, 2);
  std::vector<uint8_t> out;
  bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&upstream), sizeof(upstream)) == 0
            && write_tcp_msg(fd, query) && read_tcp_msg(fd, out);
  int e = errno;
  ::close(fd);
  if (!ok)
    return unavailable("dns: upstream over TCP: " + std::string{strerror(e)});
  return out;
}

// Asks `upstream` over UDP (then TCP if the answer is truncated).
expected<std::vector<uint8_t>> ask(const sockaddr_in& upstream, const std::vector<uint8_t>& query,
                                   uint16_t id, const dns::question& q) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return unavailable("dns: socket: " + std::string{strerror(errno)});
  set_timeouts(fd, 2);
  std::vector<uint8_t> buf(dns::max_packet);
  ssize_t n = -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&upstream), sizeof(upstream)) == 0
      && ::send(fd, query.data(), query.size(), 0) == ssize_t(query.size())) {
    auto until = clock_type::now() + upstream_timeout;
    // Skip stray datagrams (a late answer to an earlier query).
    while (clock_type::now() < until) {
      n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n < 0)
        break;
      buf.resize(size_t(n));
      auto m = check_answer(buf, id, q);
      if (m)
        break;
      buf.resize(dns::max_packet);
      n = -1;
    }
  }
  ::close(fd);
  if (n < 0)
    return unavailable("dns: upstream did not answer in 2 s");
  auto m = dns::parse(buf.data(), buf.size());
  if (m && m->truncated())
    return ask_tcp(upstream, query);
  return buf;
}

} // namespace

// -- upstream client --------------------------------------------------------------

expected<sockaddr_in> dns_upstream_address() {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(53);
  auto flag = dns_upstream();
  if (!flag.empty()) {
    auto colon = flag.rfind(':');
    std::string host = colon == std::string::npos ? flag : flag.substr(0, colon);
    int port = colon == std::string::npos ? 53 : std::atoi(flag.c_str() + colon + 1);
    if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1 || port < 1 || port > 65535)
      return invalid_argument("--dns-upstream \"" + flag + "\": must be IPv4:PORT");
    sa.sin_port = htons(uint16_t(port));
    return sa;
  }
  std::ifstream f("/etc/resolv.conf");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key, value;
    if (in >> key >> value && key == "nameserver"
        && inet_pton(AF_INET, value.c_str(), &sa.sin_addr) == 1)
      return sa;
  }
  // No nameserver line: glibc's default, the local host.
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  return sa;
}

std::vector<resolved_addr> addresses_for(const dns::message& answer, const std::string& name,
                                         std::vector<std::string>* chain) {
  std::set<std::string> names{name};
  std::string cur = name;
  uint32_t ttl = UINT32_MAX;
  for (int i = 0; i < 8; ++i) {
    auto it = std::find_if(answer.answers.begin(), answer.answers.end(), [&](auto& r) {
      return r.type == dns::type_cname && r.name == cur;
    });
    if (it == answer.answers.end())
      break;
    ttl = std::min(ttl, it->ttl);
    cur = it->target;
    if (!names.insert(cur).second)
      break; // a CNAME loop
  }
  std::vector<resolved_addr> out;
  for (auto& r : answer.answers)
    if ((r.type == dns::type_a || r.type == dns::type_aaaa) && names.count(r.name))
      out.push_back({r.addr, std::min(ttl, r.ttl)});
  if (chain)
    chain->assign(names.begin(), names.end());
  return out;
}

expected<std::vector<resolved_addr>> resolve_upstream(const sockaddr_in& upstream,
                                                      const std::string& name, size_t max_addrs) {
  static std::mt19937 rng{std::random_device{}()};
  static std::mutex rng_m;
  std::vector<resolved_addr> out;
  std::string why;
  int answered = 0;
  for (uint16_t type : {dns::type_a, dns::type_aaaa}) {
    uint16_t id;
    {
      std::lock_guard<std::mutex> g(rng_m);
      id = uint16_t(rng());
    }
    auto query = dns::build_query(id, name, type);
    if (query.empty())
      return invalid_argument("dns: \"" + name + "\" is not a valid name");
    dns::question q{name, type, dns::class_in};
    auto a = ask(upstream, query, id, q);
    if (!a) {
      why = a.err().message;
      continue;
    }
    auto m = check_answer(*a, id, q);
    if (!m) {
      why = m.err().message;
      continue;
    }
    ++answered;
    if (m->rcode() != 0) {
      why = m->rcode() == 3 ? "NXDOMAIN" : "rcode " + std::to_string(m->rcode());
      continue;
    }
    for (auto& r : addresses_for(*m, name))
      if (out.size() < max_addrs)
        out.push_back(r);
  }
  if (!out.empty())
    return out;
  if (!answered)
    return unavailable("\"" + name + "\" does not resolve: " + why);
  return not_found("\"" + name + "\" does not resolve: " + (why.empty() ? "no address" : why));
}

// -- server --------------------------------------------------------------------------

expected<std::unique_ptr<dns_resolver>> dns_resolver::start(uint32_t addr, uint16_t port,
                                                            sockaddr_in upstream, dns_gate* gate) {
  std::unique_ptr<dns_resolver> r{new dns_resolver()};
  r->upstream_ = upstream;
  r->gate_ = gate;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr;
  sa.sin_port = htons(port);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
  auto fail = [&](const char* what) {
    return unavailable(std::string{"dns resolver on "} + ip + ":" + std::to_string(port) + ": "
                       + what + ": " + strerror(errno));
  };
  int one = 1;
  r->udp_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  r->tcp_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (r->udp_ < 0 || r->tcp_ < 0 || !r->loop_.ok())
    return fail("socket");
  ::setsockopt(r->tcp_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(r->udp_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return fail("bind udp");
  if (::bind(r->tcp_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return fail("bind tcp");
  if (::listen(r->tcp_, 64) != 0)
    return fail("listen");
  r->loop_.start([raw = r.get()] { raw->udp_loop(); });
  return r;
}

dns_resolver::counters& dns_resolver::node_counters() {
  static counters all;
  return all;
}

dns_resolver::~dns_resolver() {
  loop_.stop(); // no new queries or connections
  tcp_conns_.stop();
  for (int fd : {udp_, tcp_})
    if (fd >= 0)
      ::close(fd);
}

std::vector<uint8_t> dns_resolver::decide(uint32_t src, const uint8_t* d, size_t len,
                                          bool& forward, dns::message& q) {
  forward = false;
  auto m = dns::parse(d, len);
  if (!m || !dns::check_query(*m)) {
    ++stats_.dropped;
    return {};
  }
  q = std::move(*m);
  switch (gate_->admit(src, q.questions[0].name)) {
  case dns_gate::verdict::unknown:
    ++stats_.dropped;
    return {};
  case dns_gate::verdict::refuse:
    ++stats_.refused;
    return dns::refused(q);
  case dns_gate::verdict::allow:
    break;
  }
  ++stats_.forwarded;
  forward = true;
  return {};
}

void dns_resolver::udp_loop() {
  std::mt19937 rng{std::random_device{}()};
  std::vector<pending> inflight;
  std::vector<uint8_t> buf(dns::max_packet);
  while (!loop_.stopping()) {
    tcp_conns_.reap();
    std::vector<pollfd> fds = {{udp_, POLLIN, 0}, {tcp_, POLLIN, 0},
                               {loop_.wake_fd(), POLLIN, 0}};
    for (auto& p : inflight)
      fds.push_back({p.fd, POLLIN, 0});
    int timeout = 1000;
    auto now = clock_type::now();
    for (auto& p : inflight)
      timeout = std::min<int>(timeout, std::max<int64_t>(0, std::chrono::duration_cast<
                                       std::chrono::milliseconds>(p.deadline - now).count()));
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR)
      break;
    if (loop_.stopping())
      break;
    // Answers from upstream, and expired queries (the stub retries).
    now = clock_type::now();
    for (size_t i = 0; i < inflight.size();) {
      auto& p = inflight[i];
      bool done = now >= p.deadline;
      if (fds[3 + i].revents & POLLIN) {
        buf.resize(dns::max_packet);
        ssize_t n = ::recv(p.fd, buf.data(), buf.size(), 0);
        if (n > 0) {
          buf.resize(size_t(n));
          if (auto m = check_answer(buf, p.new_id, p.q)) {
            gate_->answered(p.src, *m);
            set_id(buf, p.orig_id);
            ::sendto(udp_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&p.client),
                     sizeof(p.client));
            done = true;
          } else {
            ++stats_.dropped;
          }
        }
      }
      if (done) {
        ::close(p.fd);
        fds.erase(fds.begin() + 3 + long(i));
        inflight.erase(inflight.begin() + long(i));
      } else {
        ++i;
      }
    }
    // New queries.
    for (int k = 0; k < 64 && (fds[0].revents & POLLIN); ++k) {
      sockaddr_in from{};
      socklen_t fl = sizeof(from);
      buf.resize(dns::max_packet);
      ssize_t n = ::recvfrom(udp_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from),
                             &fl);
      if (n < 0)
        break;
      if (size_t(n) > dns::max_udp_query) {
        ++stats_.dropped;
        continue;
      }
      bool forward;
      dns::message q;
      auto reply = decide(from.sin_addr.s_addr, buf.data(), size_t(n), forward, q);
      if (!reply.empty())
        ::sendto(udp_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), fl);
      if (!forward)
        continue;
      if (inflight.size() >= max_inflight) {
        ++stats_.dropped;
        continue;
      }
      pending p;
      p.fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (p.fd < 0)
        continue;
      p.client = from;
      p.orig_id = q.id;
      p.new_id = uint16_t(rng());
      p.src = from.sin_addr.s_addr;
      p.q = q.questions[0];
      p.deadline = clock_type::now() + upstream_timeout;
      std::vector<uint8_t> out(buf.begin(), buf.begin() + n);
      set_id(out, p.new_id);
      if (::connect(p.fd, reinterpret_cast<sockaddr*>(&upstream_), sizeof(upstream_)) != 0
          || ::send(p.fd, out.data(), out.size(), 0) != ssize_t(out.size())) {
        ::close(p.fd);
        continue;
      }
      inflight.push_back(std::move(p));
      fds.push_back({inflight.back().fd, POLLIN, 0});
    }
    // New TCP connections.
    if (fds[1].revents & POLLIN) {
      sockaddr_in from{};
      socklen_t fl = sizeof(from);
      int c = ::accept4(tcp_, reinterpret_cast<sockaddr*>(&from), &fl, SOCK_CLOEXEC);
      if (c >= 0 && !tcp_conns_.spawn(c, [this, src = from.sin_addr.s_addr](
                                             conn_threads::conn& cn) { tcp_conn(cn.client, src); }))
        ++stats_.dropped;
    }
  }
  for (auto& p : inflight)
    ::close(p.fd);
}

void dns_resolver::tcp_conn(int fd, uint32_t src) {
  std::mt19937 rng{std::random_device{}()};
  set_timeouts(fd, tcp_timeout_s);
  std::vector<uint8_t> msg;
  while (!loop_.stopping() && read_tcp_msg(fd, msg)) {
    bool forward;
    dns::message q;
    auto reply = decide(src, msg.data(), msg.size(), forward, q);
    if (forward) {
      uint16_t id = uint16_t(rng());
      set_id(msg, id);
      auto a = ask_tcp(upstream_, msg);
      if (!a)
        return;
      auto m = check_answer(*a, id, q.questions[0]);
      if (!m) {
        ++stats_.dropped;
        return;
      }
      gate_->answered(src, *m);
      reply = std::move(*a);
      set_id(reply, q.id);
    }
    if (reply.empty() || !write_tcp_msg(fd, reply))
      return;
  }
}

} // namespace dsec::net
