#include "cmd/rest_call.hpp"

#include <cctype>
#include <cstdlib>
#include <iostream>

#include "core/host_port.hpp"
#include "core/json_codec.hpp"

namespace dsec::cli {

expected<sys::http_response> rest_call(const args& a, const std::string& method,
                                       const std::string& target, const std::string& body,
                                       const std::string& ctype,
                                       std::chrono::milliseconds timeout) {
  auto addr = a.get("rest", ::getenv("DSEC_REST") ? ::getenv("DSEC_REST") : "127.0.0.1:7070");
  auto hp = parse_host_port(addr);
  if (!hp)
    return hp.err();
  sys::http_client client{hp->first, hp->second};
  if (auto key = ::getenv("DSEC_API_KEY"); key && *key) // a node with --api-key-file
    client.add_header("X-API-Key", key);
  auto res = client.request(method, target, body, ctype, timeout);
  if (!res)
    return res.err();
  if (res->status >= 300)
    return json_codec::decode_error(res->body, res->status);
  return res;
}

int fail(const std::string& cmd, const error& err) {
  std::cerr << "dsec " << cmd << ": " << err.message << " (" << to_string(err.code) << ")\n";
  return 1;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      out += static_cast<char>(c);
    else
      out += {'%', hex[c >> 4], hex[c & 15]};
  }
  return out;
}

} // namespace dsec::cli
