// API key file, checks and envd tokens (api_keys.hpp).
#include "api/api_keys.hpp"

#include "layers/digest.hpp"
#include "sys/fs.hpp"

namespace dsec {

namespace {

bool same(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

} // namespace

expected<std::vector<std::string>> load_api_keys(const std::string& path) {
  auto text = sys::read_file(path);
  if (!text)
    return error{errc::invalid_argument, "api key file " + path + ": " + text.err().message};
  std::vector<std::string> keys;
  size_t pos = 0;
  while (pos < text->size()) {
    auto nl = text->find('\n', pos);
    if (nl == std::string::npos)
      nl = text->size();
    auto line = text->substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#')
      continue;
    line = line.substr(start);
    if (line.size() < 16)
      return invalid_argument("api key file " + path + ": a key is shorter than 16 bytes");
    keys.push_back(line);
  }
  if (keys.empty())
    return invalid_argument("api key file " + path + ": holds no key");
  return keys;
}

bool key_matches(const std::vector<std::string>& keys, std::string_view candidate) {
  bool ok = false;
  for (auto& k : keys)
    ok |= same(k, candidate);
  return ok && !candidate.empty();
}

std::string envd_token(const std::string& key, const std::string& id) {
  return layers::digest_hex(layers::sha256_string("dsec-envd-token\n" + key + "\n" + id));
}

bool envd_token_matches(const std::vector<std::string>& keys, const std::string& id,
                        std::string_view token) {
  bool ok = false;
  for (auto& k : keys)
    ok |= same(envd_token(k, id), token);
  return ok && !token.empty();
}

std::string bearer_key(std::string_view v) {
  constexpr std::string_view prefix = "Bearer ";
  if (v.size() <= prefix.size() || v.substr(0, prefix.size()) != prefix)
    return {};
  return std::string{v.substr(prefix.size())};
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

} // namespace dsec
