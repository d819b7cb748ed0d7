// A sandbox's host mask (E2B's `network.maskRequestHost`, issue 27): the Host
// header every request through the node's port proxy carries when it
// reaches the sandbox's port, with `${PORT}` replaced by that port. E2B's
// proxy does the same, so a server in the sandbox that checks its Host (a
// dev server's allowed hosts, virtual hosts) sees one name whatever URL the
// client used. The mask lives in the sandbox's labels under
// host_mask_label (hidden from E2B's metadata), so any creator can set it
// and it survives a node restart with the rest of the spec; validate()
// refuses a label value that is not a mask. Pure.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec {

/// The label whose value is a sandbox's host mask.
inline constexpr const char* host_mask_label = "dsec.mask_request_host";

/// Checks a mask: 1-255 bytes of letters, digits, `.-_:[]` and `${PORT}`;
/// invalid_argument naming `field` and the first bad character otherwise
/// (a CR or LF would let the mask add headers of its own).
[[nodiscard]] status check_host_mask(std::string_view mask, const std::string& field);

/// The Host header for `port`: the mask with every `${PORT}` replaced.
std::string masked_host(std::string_view mask, int port);

} // namespace dsec
