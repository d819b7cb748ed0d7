// Merging layer exec defaults and checking users (see layer_config.hpp).
#include "core/layer_config.hpp"

#include <cctype>

namespace dsec {

layer_config merge_layer_configs(const std::vector<layer_config>& bottom_first) {
  layer_config out;
  for (auto& c : bottom_first) {
    for (auto& [k, v] : c.env)
      out.env[k] = v;
    if (!c.workdir.empty())
      out.workdir = c.workdir;
    if (!c.user.empty())
      out.user = c.user;
    if (!c.start.empty())
      out.start = c.start;
  }
  return out;
}

std::map<std::string, std::string> overlay_env(std::map<std::string, std::string> base,
                                               const std::map<std::string, std::string>& over) {
  for (auto& [k, v] : over)
    base[k] = v;
  return base;
}

namespace {

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 10)
    return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return std::stoull(s) < 0xffffffffull; // (uid_t)-1 means "no change" to setuid
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || s[0] == '-')
    return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return false;
  return true;
}

bool valid_part(const std::string& s) {
  return all_digits(s) || (valid_name(s) && !std::isdigit(static_cast<unsigned char>(s[0])));
}

} // namespace

status validate_user(const std::string& user, const std::string& what) {
  auto colon = user.find(':');
  auto name = user.substr(0, colon);
  auto group = colon == std::string::npos ? std::string{} : user.substr(colon + 1);
  if (!valid_part(name) || (colon != std::string::npos && !valid_part(group)))
    return invalid_argument(what + " \"" + user.substr(0, 80)
                            + "\": must be a user name or uid, optionally followed by"
                              " :group or :gid (names of letters, digits, '_', '-', '.')");
  return {};
}

status validate_layer_config(const layer_config& c) {
  for (auto& [k, v] : c.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos
        || v.find('\0') != std::string::npos)
      return invalid_argument("layer config: bad environment entry \"" + k.substr(0, 80) + "\"");
  }
  if (!c.workdir.empty() && (c.workdir[0] != '/' || c.workdir.find('\0') != std::string::npos))
    return invalid_argument("layer config: workdir \"" + c.workdir.substr(0, 200)
                            + "\" is not an absolute path");
  if (!c.start.empty() && c.start[0].empty())
    return invalid_argument("layer config: start command has an empty argv[0]");
  for (auto& a : c.start)
    if (a.find('\0') != std::string::npos)
      return invalid_argument("layer config: start command argument holds a NUL byte");
  if (!c.user.empty())
    return validate_user(c.user, "layer config: user");
  return {};
}

} // namespace dsec
