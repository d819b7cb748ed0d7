// Signed file URLs of E2B's secure sandboxes, the pure half. The SDK's
// downloadUrl/uploadUrl sign `path:operation:user:envdAccessToken[:expiry]`
// (sha256, base64 without padding, prefixed "v1_"; js-sdk
// src/sandbox/signature.ts) and put it in GET/POST /files as `signature`
// and `signature_expiration` (Unix seconds), so a plain fetch of the URL,
// with no header, reads or writes that one path until it expires.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::e2b {

/// What a signed /files request claims: the signature, the operation its
/// method stands for, and the fields that were signed.
struct signed_request {
  std::string signature;
  std::string operation; // "read" (GET) or "write" (POST)
  std::string path;      // `path` as sent, unresolved
  std::string user;      // `username`, "" for the default user
  std::optional<int64_t> expiration;
};

/// The signed fields of a /files request with a `signature` parameter;
/// invalid_argument for another method or a malformed expiration.
[[nodiscard]] expected<signed_request> parse_signed_request(
  std::string_view method, const std::map<std::string, std::string>& query);

/// The signature E2B's SDK computes for these fields with `token`.
std::string file_signature(const std::string& path, const std::string& operation,
                           const std::string& user, const std::string& token,
                           std::optional<int64_t> expiration);

/// True if `r` was signed with `token` (compared in constant time).
bool signature_matches(const signed_request& r, const std::string& token);

/// The sandbox id of envd's host form `49983-<id>.<domain>[:port]` ("" if
/// `host` is not that form or `domain` is empty).
std::string envd_host_sandbox(std::string_view host, std::string_view domain);

} // namespace dsec::e2b
