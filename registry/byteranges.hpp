// Several byte ranges of a blob in one HTTP request: the Range header that
// asks for them and the multipart/byteranges answer (RFC 9110 14.6) that
// carries them. CNCF distribution serves blobs through Go's
// http.ServeContent, which answers such a request; each extra range costs it
// ~0.5 ms of CPU where a request costs ~3.5 ms (bench/range_latency.py
// --multi), so the lazy blob daemon sends the misses that queue on one blob
// together (lazyfs/range_batcher.hpp). Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::registry {

/// Bytes [offset, offset+len) of a blob.
struct byte_range {
  uint64_t offset = 0;
  uint32_t len = 0;
};

/// "bytes=a-b,c-d,..." for `ranges` (each non-empty), in the order given.
std::string range_header_value(const std::vector<byte_range>& ranges);

/// The bytes of each of `ranges`, in order, from an answer to a request for
/// them: a 206 multipart/byteranges body (`content_type` names its
/// boundary), or a single part (`content_range` "bytes a-b/n", when the
/// server joined the ranges into one) that covers them all. A range may come
/// back short only where its part ends at the blob's end. invalid_argument
/// says what is malformed or which range the answer lacks.
expected<std::vector<std::string>> split_byteranges(const std::string& body,
                                                    const std::string& content_type,
                                                    const std::string& content_range,
                                                    const std::vector<byte_range>& ranges);

} // namespace dsec::registry
