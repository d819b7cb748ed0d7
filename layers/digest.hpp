// Content digests of layer images: "sha256:<64 lower-case hex>", computed with
// libcrypto's EVP interface. A digest names a blob in the store, a mount dir in
// the mount cache and the thing peers verify after a fetch, so every part of
// dsec that handles a layer speaks this one spelling.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::layers {

/// "sha256:<hex>" of `data`.
std::string sha256_string(std::string_view data);

/// "sha256:<hex>" of the file at `path`, read in 1 MiB chunks. Fails with
/// not_found if the file is missing, internal on a read error.
expected<std::string> sha256_file(const std::string& path);

/// True for "sha256:" followed by exactly 64 lower-case hex digits.
bool is_valid_digest(std::string_view digest);

/// The hex part of a valid digest ("sha256:ab.." -> "ab.."); empty if invalid.
std::string digest_hex(std::string_view digest);

} // namespace dsec::layers
