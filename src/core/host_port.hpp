// The grammar of a node address, `host:port`: the one parser of that input,
// for every flag and peer record that names a node (--rest, --listen,
// --advertise, --seed, DSEC_ADDR, member addresses), so the CLI refuses
// exactly what the node would. Pure and standard-library only.
//
//   127.0.0.1:7070   localhost:7070   node-3.cluster:1   [::1]:7070
//
// The host is not resolved or checked beyond being non-empty; IPv6 hosts go in
// brackets. The port is decimal, 1..65535 (0 too where a listener may take any
// free port).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.hpp"

namespace dsec {

/// Splits "127.0.0.1:7070", "localhost:7070" or "[::1]:7070" into host (without
/// brackets) and port. Fails with invalid_argument naming the input when the
/// port is missing, not a number or out of 1..65535 (0..65535 with
/// `allow_port_zero`, for listening on any free port), or the host is empty.
expected<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text,
                                                           bool allow_port_zero = false);

} // namespace dsec
