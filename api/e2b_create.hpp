// The options of E2B's create body beyond the template, timeout, metadata and
// envs (parse_create, e2b_codec.hpp), mapped onto a dsec spec or refused by
// name: never accepted and ignored. Pure, like the rest of api/.
//
//   autoPause true            -> on_timeout "pause" (lifecycle.onTimeout)
//   autoPauseMemory false     -> refused (a filesystem-only pause)
//   autoResume {enabled}      -> auto_resume (false when absent, as in E2B:
//                                a paused sandbox resumes only on connect)
//   allow_internet_access     -> false: network none; true: every address
//   network.allowOut/denyOut  -> network.allow and network.deny: denyOut
//                                0.0.0.0/0 closes the internet, other denyOut
//                                addresses and CIDRs close themselves in an
//                                open internet; allowOut wins over denyOut
//                                (core/deny_list.hpp)
//   network.allowPublicTraffic, maskRequestHost: api/e2b_ports.hpp
//   secure, mcp, volumeMounts, iam, network.rules/egressProxy/httpsPorts and
//   any field not named here -> 400 naming it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::e2b {

/// Sets `spec`'s lifecycle and network from the create body; invalid_argument
/// naming the first option dsec does not implement. `tokens`: the node has
/// API keys, so envd calls need the sandbox's access token (E2B's `secure`).
[[nodiscard]] status apply_create_options(std::string_view body, sandbox_spec& spec,
                                          bool tokens);

/// POST /sandboxes/{id}/pause {"memory": bool} (the SDK's keepMemory,
/// default true): whether the pause keeps the memory. Any other field, or
/// a `memory` that is not a boolean, is a 400 naming it.
[[nodiscard]] expected<bool> parse_pause(std::string_view body);

/// `lifecycle` of E2B's sandbox answer: {"onTimeout": "pause"|"kill",
/// "autoResume": bool}, as JSON text.
std::string lifecycle_json(const sandbox_info& info);

/// PUT /sandboxes/{id}/network (E2B's updateNetwork): allowOut, denyOut
/// and allow_internet_access mapped as a create maps them, replacing the
/// whole policy (an omitted field is cleared: an empty body leaves the
/// sandbox no network, dsec's default); egressProxy, rules and any other
/// field are refused by name.
[[nodiscard]] expected<network_policy> parse_network_update(std::string_view body,
                                                            const std::string& id);

/// Unix milliseconds of an RFC 3339 time (`2026-12-04T13:22:46.123Z`, an
/// offset `+01:00` too), as E2B's startedAfter; invalid_argument otherwise.
[[nodiscard]] expected<int64_t> parse_rfc3339_ms(std::string_view text, const char* field);

} // namespace dsec::e2b
