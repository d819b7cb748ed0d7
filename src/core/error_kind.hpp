// Whose failure an error is: the platform's (infra: the node, its peers, the
// host) or the request's and the agent's (model). A trainer counts rollouts
// lost to infrastructure apart from reward: an infra failure is retried or
// rebuilt, a model failure is the rollout's outcome. The one table, used by
// the REST errors (`"infra": true|false`) and by the Python SDK (err.infra):
//
//   code                  infra  e.g.
//   invalid_argument      no     a bad field, an unknown layer, a relative path
//   too_large             no     a body, file or list past its limit
//   not_found             no     no such sandbox (destroyed, or expired by its own
//                                ttl_s / paused_ttl_s), file or layer
//   conflict              no     request_id reused with another spec
//   resource_exhausted    yes    node or cluster out of memory, cpu or slots
//   unavailable           yes    node lost, dead or left, connection dropped, node
//                                shutting down, sandbox lost with its node or its
//                                init killed (the node's or the host's doing)
//     ... but "failed (oom)" no  the agent went past its own memory_mb: the node
//                                enforced the spec, as a command's timeout_s
//     ... but "ttl expired" no  the sandbox outlived the spec's ttl_s (or, paused,
//                                its paused_ttl_s: "paused ttl expired")
//   timeout               yes    the platform did not answer within its bound (a
//                                command's own timeout_s is a result, timed_out)
//   internal              yes    a bug or a host failure
#pragma once

#include "core/error.hpp"

namespace dsec {

/// True if `err` is the platform's failure, false if the request's or the
/// agent's (table above). No error (errc::none) is false.
[[nodiscard]] bool is_infra(const error& err);

} // namespace dsec
