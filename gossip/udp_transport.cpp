// UDP transport implementation (see udp_transport.hpp).
#include "gossip/udp_transport.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsec::gossip {

namespace {

constexpr char packet_tag = 'P';
constexpr char stream_tag = 'S';
/// Largest UDP payload over IPv4.
constexpr size_t max_datagram = 65507;

std::optional<sockaddr_in> lookup(const std::string& host, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) == 1)
    return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res)
    return std::nullopt;
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return sa;
}

std::optional<std::pair<std::string, uint16_t>> split(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return std::nullopt;
  char* end = nullptr;
  auto port = std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535)
    return std::nullopt;
  return std::make_pair(address.substr(0, colon), static_cast<uint16_t>(port));
}

} // namespace

expected<std::unique_ptr<udp_transport>> udp_transport::open(const std::string& host,
                                                             uint16_t port) {
  auto where = host + ":" + std::to_string(port);
  auto sa = lookup(host, port);
  if (!sa)
    return invalid_argument("gossip: cannot resolve " + where);
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return sys_error("gossip: socket for", where, errno);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&*sa), sizeof *sa) != 0) {
    int err = errno;
    ::close(fd);
    return sys_error("gossip: bind udp", where, err, errc::unavailable);
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    int err = errno;
    ::close(fd);
    return sys_error("gossip: eventfd for", where, err);
  }
  return std::unique_ptr<udp_transport>{new udp_transport(fd, wake)};
}

udp_transport::~udp_transport() {
  ::close(fd_);
  ::close(wake_fd_);
}

const sockaddr_in* udp_transport::resolve(const std::string& address) {
  auto it = addrs_.find(address);
  if (it == addrs_.end()) {
    std::optional<sockaddr_in> sa;
    if (auto hp = split(address))
      sa = lookup(hp->first, hp->second);
    it = addrs_.emplace(address, sa).first;
  }
  return it->second ? &*it->second : nullptr;
}

void udp_transport::send(const std::string& to, char tag, bytes data) {
  auto* sa = resolve(to);
  if (!sa || data.size() + 1 > max_datagram) {
    ++send_errors_;
    return;
  }
  data.insert(data.begin(), static_cast<uint8_t>(tag));
  // Non-blocking: a full socket buffer drops the datagram, as a lossy network would.
  if (::sendto(fd_, data.data(), data.size(), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(sa),
               sizeof *sa)
      < 0)
    ++send_errors_;
}

void udp_transport::send_packet(const std::string& to, bytes data) {
  send(to, packet_tag, std::move(data));
}

void udp_transport::send_stream(const std::string& to, bytes data) {
  send(to, stream_tag, std::move(data));
}

std::optional<udp_transport::datagram> udp_transport::receive() {
  bytes buf(max_datagram + 1);
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR)
      return std::nullopt;
    if (fds[1].revents)
      return std::nullopt;
    if (!(fds[0].revents & POLLIN))
      continue;
    sockaddr_in from{};
    socklen_t len = sizeof from;
    auto n = ::recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 1 || (buf[0] != packet_tag && buf[0] != stream_tag))
      continue; // empty or not ours: dropped, like any garbage datagram
    char ip[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
    datagram d;
    d.from = std::string{ip} + ":" + std::to_string(ntohs(from.sin_port));
    d.stream = buf[0] == stream_tag;
    d.data.assign(buf.begin() + 1, buf.begin() + n);
    return d;
  }
}

void udp_transport::shutdown() {
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

} // namespace dsec::gossip
