// One REST call from a CLI verb to a running node: the address from --rest,
// else $DSEC_REST, else 127.0.0.1:7070; the key from $DSEC_API_KEY when the
// node was started with --api-key-file. Shared by every client verb.
#pragma once

#include <chrono>
#include <string>

#include "cmd/args.hpp"
#include "core/error.hpp"
#include "sys/http_client.hpp"

namespace dsec::cli {

/// Sends a request; a non-2xx answer becomes the node's error (code and
/// message from its JSON body).
expected<sys::http_response> rest_call(const args& a, const std::string& method,
                                       const std::string& target, const std::string& body = {},
                                       const std::string& ctype = "application/json",
                                       std::chrono::milliseconds timeout = std::chrono::hours(24));

/// `s` percent-encoded for a URL: unreserved characters (RFC 3986) stay,
/// and so does '/' when `keep_slash` (a path rather than one segment).
std::string url_encode(const std::string& s, bool keep_slash = false);

/// Prints `dsec CMD: message (code)` on stderr; returns 1.
int fail(const std::string& cmd, const error& err);

} // namespace dsec::cli
