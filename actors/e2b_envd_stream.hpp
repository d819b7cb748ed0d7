// What envd's streaming RPCs share (e2b_envd.cpp, e2b_watch.cpp): the
// Connect content type, the keepalive period, a stream's early error and
// the one message of a streaming request.
#pragma once

#include <chrono>
#include <string>

#include "actors/e2b_gateway.hpp"
#include "api/e2b_user.hpp"
#include "core/error.hpp"

namespace dsec::e2b {

constexpr const char* connect_json = "application/connect+json";

/// A silent stream gets a keepalive event this often, well under undici's
/// 300 s body timeout.
constexpr auto keepalive_every = std::chrono::seconds(30);

/// A call on a paused sandbox that does not resume on its own (E2B's
/// lifecycle without autoResume; the sandbox actor refuses it, "is paused"):
/// E2B's proxy answers 502, which the SDK reads as the sandbox not running.
bool paused_refusal(const error& err);
void answer_paused(const http_call& c, const error& err);

/// A streaming RPC that fails before its first message: a 200 with only the
/// end-of-stream envelope carrying the error, as the Connect protocol says.
void stream_error(const http_call& c, const error& err);

/// The message of a streaming request: enveloped for connect+json.
[[nodiscard]] expected<std::string> stream_message(const http_call& c);

/// WatchDir (e2b_watch.cpp) as `who`.
void watch_dir(const gateway_ref& g, const http_call& c, const std::string& id,
               const envd_identity& who);

} // namespace dsec::e2b
