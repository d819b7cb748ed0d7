// E2B's side of ports (issue 26 part 3), pure: the create option that gives
// a sandbox a traffic token (`network.allowPublicTraffic: false`: requests
// to its ports must carry header e2b-traffic-access-token), and the fields
// of E2B's sandbox answer that getHost and the SDK's proxy read: `domain`
// (the node's --sandbox-domain) and `trafficAccessToken`.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::e2b {

/// A create body's traffic token: a fresh random token if it asks for one
/// (network.allowPublicTraffic false), "" if not. (maskRequestHost:
/// api/e2b_host_mask.hpp.)
[[nodiscard]] expected<std::string> traffic_token_of_create(std::string_view body);

/// encode_sandbox (e2b_codec.hpp) with `domain` (null when empty) and the
/// sandbox's trafficAccessToken (its traffic_token_label, hidden from
/// metadata).
std::string encode_sandbox(const sandbox_info& info, const std::string& access_token,
                           const std::string& domain);

} // namespace dsec::e2b
