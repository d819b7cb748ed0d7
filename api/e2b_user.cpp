// The identity of an E2B envd call (e2b_user.hpp).
#include "api/e2b_user.hpp"

#include <cctype>
#include <cstdint>
#include <map>
#include <sstream>
#include <vector>

namespace dsec::e2b {

namespace {

/// RFC 4648 base64 with padding; nullopt-like false on a bad alphabet.
bool decode_base64(std::string_view in, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    int v = val(in[i]);
    if (v < 0)
      return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  for (; i < in.size(); ++i)
    if (in[i] != '=')
      return false;
  return true;
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == sep) {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(std::move(cur));
  return out;
}

bool parse_u32(const std::string& s, uint32_t& out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  auto v = std::stoull(s);
  if (v > UINT32_MAX - 1)
    return false;
  out = static_cast<uint32_t>(v);
  return true;
}

/// name -> id of the third field of each line, the first name of an id kept.
std::map<uint32_t, std::string> names_by_id(std::string_view text) {
  std::map<uint32_t, std::string> out;
  std::istringstream in{std::string{text}};
  for (std::string line; std::getline(in, line);) {
    auto f = split(line, ':');
    uint32_t id = 0;
    if (f.size() >= 3 && !f[0].empty() && parse_u32(f[2], id))
      out.emplace(id, f[0]);
  }
  return out;
}

} // namespace

owner_names owner_names_of(std::string_view passwd, std::string_view group) {
  return {names_by_id(passwd), names_by_id(group)};
}

expected<std::string> basic_auth_user(std::string_view authorization) {
  constexpr std::string_view scheme = "Basic ";
  if (authorization.size() < scheme.size())
    return std::string{};
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i]))
        != std::tolower(static_cast<unsigned char>(scheme[i])))
      return std::string{};
  auto token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ')
    token.remove_prefix(1);
  std::string decoded;
  if (token.empty() || token.size() > 1024 || !decode_base64(token, decoded))
    return invalid_argument("envd: Authorization Basic is not base64 of \"user:\"");
  auto colon = decoded.find(':');
  auto name = decoded.substr(0, colon);
  if (name.empty() || name.size() > 64
      || name.find_first_of(std::string{"/\n\r\t \0", 6}) != std::string::npos)
    return invalid_argument("envd: Authorization Basic names no valid user");
  return name;
}

expected<envd_identity> identity_of(std::string_view passwd, std::string_view asked) {
  std::string want = asked.empty() ? std::string{default_user} : std::string{asked};
  std::istringstream in{std::string{passwd}};
  for (std::string line; std::getline(in, line);) {
    auto f = split(line, ':');
    if (f.size() < 7 || f[0] != want)
      continue;
    envd_identity id;
    if (!parse_u32(f[2], id.uid) || !parse_u32(f[3], id.gid))
      break; // a broken entry is no user
    id.user = want;
    id.home = !f[5].empty() && f[5][0] == '/' ? f[5] : "/";
    return id;
  }
  if (asked.empty())
    return envd_identity{}; // no E2B user here: the sandbox's own default
  return invalid_argument("envd: user \"" + want.substr(0, 64)
                          + "\" is not in the sandbox's /etc/passwd");
}

} // namespace dsec::e2b
