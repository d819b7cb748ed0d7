// API keys of a node (--api-key-file): who may call the REST gateway and the
// E2B API. A key file holds one key per line (blank lines and lines starting
// with '#' are skipped). REST callers send `X-API-Key: KEY` or
// `Authorization: Bearer KEY`; the E2B SDK sends X-API-Key to the control
// plane and, to envd, the per-sandbox access token the create answered
// (a digest of a key and the sandbox id, so every peer sharing the key file
// checks it without state). Pure: no CAF, no Beast.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec {

/// Reads a key file; invalid_argument if it holds no key or a key shorter
/// than 16 bytes (a guessable key is no protection).
[[nodiscard]] expected<std::vector<std::string>> load_api_keys(const std::string& path);

/// True if `candidate` is one of `keys` (compared in constant time).
bool key_matches(const std::vector<std::string>& keys, std::string_view candidate);

/// The envd access token of sandbox `id` under `key`.
std::string envd_token(const std::string& key, const std::string& id);

/// True if `token` is the envd token of `id` under one of `keys`.
bool envd_token_matches(const std::vector<std::string>& keys, const std::string& id,
                        std::string_view token);

/// The key of an `Authorization: Bearer KEY` value ("" if not that form).
std::string bearer_key(std::string_view authorization);

/// True for a loopback listen address (127.0.0.0/8, ::1, localhost).
bool is_loopback_host(const std::string& host);

} // namespace dsec
