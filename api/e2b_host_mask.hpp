// E2B's `network.maskRequestHost` on create (issue 27), pure: the mask a
// create body asks for, checked (core/host_mask.hpp), for the sandbox's
// host_mask_label; the node's port proxy then sends it as the Host header
// of every request to the sandbox's ports (actors/gateway_ports.cpp).
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::e2b {

/// The create body's network.maskRequestHost, "" if absent or null;
/// invalid_argument naming it if it is not a string or not a host mask.
[[nodiscard]] expected<std::string> host_mask_of_create(std::string_view body);

} // namespace dsec::e2b
