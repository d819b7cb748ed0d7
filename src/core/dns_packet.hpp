// The DNS wire format (RFC 1035, EDNS0 of RFC 6891) as far as the node's
// resolver needs it: parse a query or an answer with every bound checked,
// build a REFUSED answer to a query, and build a query of the node's own.
// Pure: no sockets, no allocation beyond the results.
//
// Bounds that make hostile packets harmless: a compression pointer must
// point strictly before the name that uses it (so pointers never loop) and
// at most 64 are followed per name; a name is at most 255 bytes and a label
// 63; labels may hold only [A-Za-z0-9_-] (what host names and the names
// sandboxes look up use; anything else is refused as malformed rather than
// interpreted); counts must fit the packet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::dns {

constexpr uint16_t type_a = 1;
constexpr uint16_t type_cname = 5;
constexpr uint16_t type_txt = 16;
constexpr uint16_t type_aaaa = 28;
constexpr uint16_t type_opt = 41;
constexpr uint16_t class_in = 1;
constexpr uint8_t rcode_refused = 5;

/// Largest packet accepted at all (TCP's 2-byte length bound).
constexpr size_t max_packet = 65535;
/// Largest query a sandbox may send over UDP (EDNS0's practical maximum).
constexpr size_t max_udp_query = 4096;

struct question {
  std::string name; ///< lower case, no trailing dot; "" for the root
  uint16_t type = 0;
  uint16_t cls = 0;
};

struct record {
  std::string name; ///< lower case
  uint16_t type = 0;
  uint16_t cls = 0;
  uint32_t ttl = 0;
  std::string target; ///< CNAME target, lower case
  /// A (v4-mapped ::ffff:a.b.c.d) or AAAA address, network order.
  std::array<uint8_t, 16> addr{};
};

struct message {
  uint16_t id = 0;
  uint16_t flags = 0; ///< QR, opcode, AA, TC, RD, RA, Z, RCODE as on the wire
  std::vector<question> questions;
  std::vector<record> answers; ///< the answer section only
  uint16_t authority = 0;
  uint16_t additional = 0;
  bool has_opt = false;    ///< an EDNS0 OPT record was present
  uint16_t udp_size = 512; ///< the OPT's payload size, 512 without one

  bool is_response() const { return flags & 0x8000; }
  uint8_t opcode() const { return (flags >> 11) & 0xf; }
  bool truncated() const { return flags & 0x0200; }
  uint8_t rcode() const { return flags & 0xf; }
};

/// Parses a packet; invalid_argument names the first thing wrong
/// ("dns: pointer does not point backwards at byte 40").
expected<message> parse(const uint8_t* data, size_t len);

/// Checks that `m` is a query the resolver serves: not a response, opcode
/// QUERY, one question of class IN, no answers or authority, at most one
/// additional record (EDNS0's OPT).
status check_query(const message& m);

/// A REFUSED answer to `query` (its id, RD and question echoed).
std::vector<uint8_t> refused(const message& query);

/// A recursive query for `name`/`type` with an EDNS0 OPT of 1232 bytes.
std::vector<uint8_t> build_query(uint16_t id, const std::string& name, uint16_t type);

/// Encodes `name` into wire labels (no compression); false if it does not fit.
bool encode_name(const std::string& name, std::vector<uint8_t>& out);

} // namespace dsec::dns
