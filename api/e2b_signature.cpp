// Signed file URLs (e2b_signature.hpp).
#include "api/e2b_signature.hpp"

#include "api/e2b_codec.hpp"
#include "layers/digest.hpp"

namespace dsec::e2b {

namespace {

/// The raw bytes of a hex string (even length, lower-case digits).
std::string unhex(std::string_view hex) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>((nibble(hex[i]) << 4) | nibble(hex[i + 1]));
  return out;
}

bool same(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

} // namespace

expected<signed_request> parse_signed_request(std::string_view method,
                                              const std::map<std::string, std::string>& query) {
  signed_request r;
  if (method == "GET")
    r.operation = "read";
  else if (method == "POST")
    r.operation = "write";
  else
    return invalid_argument("signed file URL: " + std::string{method.substr(0, 16)}
                            + " is not a file operation (GET reads, POST writes)");
  auto get = [&](const char* k) {
    auto it = query.find(k);
    return it == query.end() ? std::string{} : it->second;
  };
  r.signature = get("signature");
  r.path = get("path");
  r.user = get("username");
  if (auto it = query.find("signature_expiration"); it != query.end()) {
    auto& v = it->second;
    bool neg = !v.empty() && v[0] == '-';
    auto digits = neg ? v.substr(1) : v;
    if (digits.empty() || digits.size() > 12
        || digits.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument("signed file URL: signature_expiration must be Unix seconds, got \""
                              + v.substr(0, 40) + "\"");
    r.expiration = (neg ? -1 : 1) * std::stoll(digits);
  }
  return r;
}

std::string file_signature(const std::string& path, const std::string& operation,
                           const std::string& user, const std::string& token,
                           std::optional<int64_t> expiration) {
  auto raw = path + ":" + operation + ":" + user + ":" + token;
  if (expiration)
    raw += ":" + std::to_string(*expiration);
  auto b64 = base64(unhex(layers::digest_hex(layers::sha256_string(raw))));
  while (!b64.empty() && b64.back() == '=')
    b64.pop_back();
  return "v1_" + b64;
}

bool signature_matches(const signed_request& r, const std::string& token) {
  return !r.signature.empty() && !token.empty()
         && same(file_signature(r.path, r.operation, r.user, token, r.expiration), r.signature);
}

std::string envd_host_sandbox(std::string_view host, std::string_view domain) {
  if (domain.empty())
    return {};
  if (auto colon = host.rfind(':'); colon != std::string_view::npos)
    host = host.substr(0, colon);
  constexpr std::string_view prefix = "49983-";
  if (host.size() <= prefix.size() + 1 + domain.size() || host.substr(0, prefix.size()) != prefix)
    return {};
  auto suffix = host.substr(host.size() - domain.size() - 1);
  if (suffix[0] != '.' || suffix.substr(1) != domain)
    return {};
  return std::string{host.substr(prefix.size(), host.size() - prefix.size() - suffix.size())};
}

} // namespace dsec::e2b
