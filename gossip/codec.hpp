// The binary wire format of gossip. A packet is a 3-byte header (magic "DG",
// version 1) followed by frames; a frame is a type byte, a LEB128 length and a
// body of LEB128 integers and length-prefixed strings. Broadcasts are stored as
// ready frames, so packing a packet is concatenation. Decoding checks every
// length against the input and the limits below and returns an error for
// garbage or truncated input; it never reads past the end. Unknown frame types
// and trailing bytes inside a body are skipped (append-only evolution).
#pragma once

#include "core/error.hpp"
#include "gossip/messages.hpp"

#include <cstddef>
#include <vector>

namespace dsec::gossip {

/// Hard limits enforced while decoding (and expected of encoders).
struct codec_limits {
  static constexpr size_t max_id = 255;
  static constexpr size_t max_address = 255;
  static constexpr size_t max_digest = 255;
  static constexpr size_t max_layers = 64;
  static constexpr size_t max_members = 1 << 20;
  /// Largest input accepted (a push/pull of a big cluster is a stream).
  static constexpr size_t max_input = 64u << 20;
};

/// Wire format version carried in every packet header.
inline constexpr uint8_t wire_version = 1;
/// Size of the packet header.
inline constexpr size_t header_size = 3;

/// Appends the packet header to `out`.
void append_header(bytes& out);

/// Encodes one message as a frame (type, length, body).
bytes encode_frame(const message& m);

/// Encodes a whole packet: header plus one frame per message.
bytes encode_packet(const std::vector<message>& msgs);

/// Decodes a packet; an error (invalid_argument) names what was wrong.
expected<std::vector<message>> decode_packet(const uint8_t* data, size_t size);

/// Convenience overload.
inline expected<std::vector<message>> decode_packet(const bytes& b) {
  return decode_packet(b.data(), b.size());
}

} // namespace dsec::gossip
