// Internal to the JSON codec: the derived TTL field of a sandbox's description
// (json_codec_ttl.cpp), split from json_codec.cpp by subject.
#pragma once

#include <nlohmann/json.hpp>

#include "core/types.hpp"

namespace dsec::json_codec {

/// Adds `"ttl_remaining_s"` (running time left, seconds; null = no TTL; it
/// stands still while paused) to `j`. `expires_at` is null while paused (the
/// TTL does not run). `"paused_ttl_s"` and `"paused_expires_at"` come from
/// the field list (core/spec_fields.hpp).
void add_ttl_fields(nlohmann::json& j, const sandbox_info& s);

} // namespace dsec::json_codec
