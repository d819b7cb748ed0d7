// The name a client asks for in the first bytes of a connection: the SNI
// (server_name) of a TLS ClientHello, or the Host header of an HTTP/1
// request. Used by the node's egress name check (backends/net/name_proxy):
// a connection to an address allowed by a NAMED rule must ask for an allowed
// name. Pure; every length is checked against the bytes at hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsec::net {

struct first_bytes_name {
  enum class result {
    need_more, ///< the record or header is not complete yet
    found,     ///< `name` holds the lower-case name (no port, no trailing dot)
    none,      ///< complete, but it names no server (no SNI, no Host)
    malformed, ///< not a ClientHello / not an HTTP request
  };
  result r = result::need_more;
  std::string name;
};

/// The SNI of a TLS ClientHello (the first record; at most 16 KiB).
first_bytes_name tls_server_name(const uint8_t* d, size_t len);

/// The Host of an HTTP/1.x request (headers up to 16 KiB).
first_bytes_name http_host(const uint8_t* d, size_t len);

} // namespace dsec::net
