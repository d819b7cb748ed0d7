// What envd 0.5.7-0.6.2 adds to POST /files, for the unmodified `e2b` SDK:
// an `application/octet-stream` body (one file, at `path=`), gzip request
// bodies (`Content-Encoding: gzip`) and file metadata sent as
// `X-Metadata-<key>: <value>` headers, kept as the file's `user.e2b.<key>`
// extended attributes. Pure functions: no CAF, no Beast.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace dsec::e2b {

/// The prefix of a metadata header, lower-cased as headers arrive.
constexpr std::string_view metadata_header_prefix = "x-metadata-";

/// The metadata of an upload from its headers (names lower-cased): keys
/// are HTTP tokens, lower-cased (as E2B's envd keeps them), values printable
/// ASCII; anything else is invalid_argument naming the key. At most
/// max_metadata_keys keys, each value at most max_metadata_value bytes.
[[nodiscard]] expected<std::map<std::string, std::string>> parse_metadata_headers(
  const std::vector<std::pair<std::string, std::string>>& headers);

constexpr size_t max_metadata_keys = 64;
constexpr size_t max_metadata_value = 4096;

/// The body of an upload as stored: `content_encoding` empty or "identity"
/// is the body itself, "gzip" is inflated (at most `max_bytes` out, else
/// too_large: a small body cannot become a huge file); another encoding is
/// invalid_argument naming it.
[[nodiscard]] expected<std::string> decode_upload_body(std::string_view content_encoding,
                                                       std::string_view body, uint64_t max_bytes);

/// `[{"name","type":"file","path"[,"metadata"]}...]` answered by POST
/// /files; `metadata` (the same for every file of one upload) is left out
/// when empty, as E2B's envd does.
std::string encode_written(const std::vector<std::string>& paths,
                           const std::map<std::string, std::string>& metadata);

} // namespace dsec::e2b
