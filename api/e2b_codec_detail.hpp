// Shared by the two halves of the E2B codec (e2b_codec.cpp, e2b_codec_files.cpp).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dsec::e2b::detail {

/// A request body as a JSON object (empty = {}); invalid_argument naming `what`.
expected<nlohmann::json> parse_object(std::string_view body, const char* what);

} // namespace dsec::e2b::detail
