// Octet-stream and gzip uploads and file metadata of envd's POST /files
// (e2b_upload.hpp).
#include "api/e2b_upload.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace dsec::e2b {

namespace {

/// RFC 7230 tchar, which is what the SDK allows in a metadata key.
bool token_char(unsigned char c) {
  if (std::isalnum(c))
    return true;
  return std::string_view{"!#$%&'*+-.^_`|~"}.find(static_cast<char>(c)) != std::string_view::npos;
}

} // namespace

expected<std::map<std::string, std::string>> parse_metadata_headers(
  const std::vector<std::pair<std::string, std::string>>& headers) {
  std::map<std::string, std::string> out;
  for (auto& [name, value] : headers) {
    if (name.rfind(metadata_header_prefix, 0) != 0)
      continue;
    auto key = name.substr(metadata_header_prefix.size());
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    auto shown = key.substr(0, 64);
    if (key.empty() || !std::all_of(key.begin(), key.end(), [](char c) {
          return token_char(static_cast<unsigned char>(c));
        }))
      return invalid_argument("upload: metadata key \"" + shown
                              + "\": must be a non-empty HTTP token");
    if (!std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c <= 0x7e; }))
      return invalid_argument("upload: metadata value of \"" + shown
                              + "\": must be printable US-ASCII");
    if (value.size() > max_metadata_value)
      return invalid_argument("upload: metadata value of \"" + shown + "\": over "
                              + std::to_string(max_metadata_value) + " bytes");
    if (out.count(key))
      return invalid_argument("upload: metadata key \"" + shown + "\" given twice");
    out[key] = value;
    if (out.size() > max_metadata_keys)
      return invalid_argument("upload: more than " + std::to_string(max_metadata_keys)
                              + " metadata keys");
  }
  return out;
}

expected<std::string> decode_upload_body(std::string_view content_encoding, std::string_view body,
                                         uint64_t max_bytes) {
  std::string enc{content_encoding};
  std::transform(enc.begin(), enc.end(), enc.begin(), ::tolower);
  if (enc.empty() || enc == "identity")
    return std::string{body};
  if (enc != "gzip")
    return invalid_argument("upload: Content-Encoding \"" + enc.substr(0, 32)
                            + "\" is not supported (gzip or none)");
  z_stream zs{};
  // 16 + MAX_WBITS: a gzip header and trailer, checked.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return internal_error("upload: gzip: inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  std::string out;
  char buf[64 * 1024];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      return invalid_argument("upload: gzip body is corrupt or truncated");
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&zs);
      return too_large("upload: gzip body inflates past the node's file limit of "
                       + std::to_string(max_bytes) + " bytes");
    }
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      return invalid_argument("upload: gzip body is truncated");
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string encode_written(const std::vector<std::string>& paths,
                           const std::map<std::string, std::string>& metadata) {
  auto arr = nlohmann::json::array();
  for (auto& p : paths) {
    auto slash = p.rfind('/');
    nlohmann::json j{{"name", p.substr(slash + 1)}, {"type", "file"}, {"path", p}};
    if (!metadata.empty())
      j["metadata"] = metadata;
    arr.push_back(std::move(j));
  }
  return arr.dump();
}

} // namespace dsec::e2b
