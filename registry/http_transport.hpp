// One HTTP exchange over libcurl, as the registry client needs it: TLS
// verified against the system CAs plus an optional extra bundle, plain HTTP
// only when the caller says the host is insecure, redirects followed when
// asked (libcurl drops a custom Authorization header when a redirect leaves
// the host, which is what storage redirects need), a stall bound, and a
// response body streamed to memory (bounded) or to a file descriptor with
// its sha256 computed on the way. Easy handles are pooled so connections are
// reused; a transport is safe to use from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::registry {

/// What to send and where the body goes.
struct http_request {
  std::string method = "GET";  ///< GET, HEAD, PUT, POST
  std::string url;
  /// Extra headers, "Name: value".
  std::vector<std::string> headers;
  /// The Authorization value ("Bearer x", "Basic y"); empty: none.
  std::string authorization;
  /// A request body in memory (PUT/POST) ...
  std::string body;
  /// ... or the file to upload instead (PUT).
  std::string body_file;
  /// Follow 3xx answers (blob downloads redirect to storage).
  bool follow = false;
  /// Also allow http:// redirect targets (the host is an insecure one).
  bool allow_http_redirect = false;
  /// 2xx body to this fd (truncated first) instead of memory; -1: memory.
  int fd = -1;
  /// Largest 2xx body kept in memory; past it the exchange fails (too_large).
  uint64_t max_body = 4u << 20;
  /// For a Range request the server answered 200 to: bytes to skip, then keep.
  uint64_t skip = 0;
  uint64_t take = UINT64_MAX;
  /// The sha256 of the body (body_digest): off for range reads, whose
  /// chunks are checked one by one, not as a body.
  bool hash_body = true;
  /// A body expected to be about max_body bytes: its buffer is sized once
  /// (a lazy read's range), not grown a copy at a time.
  bool reserve_body = false;
  std::function<void(uint64_t)> progress;
};

/// What came back.
struct http_response {
  /// 0 when the exchange failed before an answer (see transport_error).
  long status = 0;
  /// libcurl's reason when the exchange failed; empty otherwise.
  std::string transport_error;
  /// The failure kind for transport_error: timeout, unavailable, too_large.
  errc transport_code = errc::none;
  /// True when the failure was TLS certificate verification.
  bool tls_failure = false;
  /// Headers of the last answer (after redirects), names lower-cased.
  std::string content_type, docker_digest, www_authenticate, location, content_range;
  /// A 2xx body kept in memory, or the first 64 KiB of an error answer.
  std::string body;
  /// 2xx body bytes delivered (to memory or the fd), and their sha256
  /// (empty when the request asked for no hash).
  uint64_t body_bytes = 0;
  std::string body_digest;
  /// The host of the last answer (differs from the request's after a redirect).
  std::string effective_url;
  /// Redirects followed to get there.
  long redirects = 0;
};

class http_transport {
 public:
  /// `ca_file` (may be empty) is trusted in addition to the system bundle;
  /// invalid_argument names it when unreadable.
  static expected<std::shared_ptr<http_transport>> open(const std::string& ca_file,
                                                        std::chrono::milliseconds stall_timeout);
  ~http_transport();
  http_transport(const http_transport&) = delete;
  http_transport& operator=(const http_transport&) = delete;

  /// Performs `req`. Never throws; failures are in the response.
  http_response perform(const http_request& req);

 private:
  http_transport() = default;
  void* acquire();
  void release(void* h);

  std::string ca_bundle_;
  std::chrono::milliseconds stall_timeout_{30000};
  std::mutex mu_;
  std::vector<void*> idle_;
};

} // namespace dsec::registry
