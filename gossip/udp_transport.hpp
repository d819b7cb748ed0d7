// The production transport of gossip: UDP datagrams on the node's --listen
// port (the native protocol uses TCP on the same number). Both kinds of
// message go as datagrams, tagged by their first byte: packets (probes, acks,
// piggybacked broadcasts, <= config::max_packet_size) and streams (push/pull
// state sync, up to 64 KiB). UDP for streams keeps one socket and no
// connection state; 64 KiB holds the full state of a few hundred members,
// beyond which push/pull should move to TCP (not needed for our cluster sizes).
//
// Threads: send_* run on the gossip actor's thread; receive() blocks on its
// own thread (the gossip actor's receiver) until a datagram or shutdown().
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <netinet/in.h>

#include "core/error.hpp"
#include "gossip/transport.hpp"

namespace dsec::gossip {

class udp_transport final : public transport {
 public:
  /// One received datagram.
  struct datagram {
    /// "ip:port" of the sender's socket.
    std::string from;
    bool stream = false;
    bytes data;
  };

  /// Binds host:port (IPv4 or a name resolved once). Errors name the address.
  [[nodiscard]] static expected<std::unique_ptr<udp_transport>> open(const std::string& host,
                                                                     uint16_t port);
  ~udp_transport() override;

  void send_packet(const std::string& to_address, bytes data) override;
  void send_stream(const std::string& to_address, bytes data) override;

  /// Blocks until a datagram arrives; nullopt once shutdown() was called.
  std::optional<datagram> receive();

  /// Wakes receive() for good. Thread-safe, idempotent.
  void shutdown();

  /// Datagrams that could not be sent (unresolvable address, too large).
  uint64_t send_errors() const { return send_errors_; }

 private:
  udp_transport(int fd, int wake_fd) : fd_(fd), wake_fd_(wake_fd) {}
  void send(const std::string& to, char tag, bytes data);
  const sockaddr_in* resolve(const std::string& address);

  int fd_;
  int wake_fd_;
  std::unordered_map<std::string, std::optional<sockaddr_in>> addrs_;
  uint64_t send_errors_ = 0;
};

} // namespace dsec::gossip
