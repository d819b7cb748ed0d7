// The layer ref grammar (see layer_ref.hpp): names, versions and the
// `name@version` that joins them, each failure naming the rule it broke.
#include "core/layer_ref.hpp"

#include <cstddef>

namespace dsec::layers {

namespace {

constexpr size_t max_name = 128;
constexpr size_t max_version = 64;

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

} // namespace

status validate_name(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("layer name \"" + name + "\": " + why);
  };
  if (name.empty())
    return bad("must not be empty");
  if (name.size() > max_name)
    return bad("longer than 128 characters");
  if (!is_lower_alnum(name.front()))
    return bad("must start with a lower-case letter or digit");
  for (char c : name)
    if (!is_lower_alnum(c) && c != '.' && c != '_' && c != '-' && c != '/')
      return bad("only a-z, 0-9, '.', '_', '-' and '/' are allowed");
  if (name.back() == '/')
    return bad("must not end with '/'");
  if (name.find("..") != std::string::npos)
    return bad("must not contain \"..\"");
  if (name.find("//") != std::string::npos)
    return bad("must not contain \"//\"");
  return {};
}

status validate_version(const std::string& version) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("layer version \"" + version + "\": " + why);
  };
  if (version.empty())
    return bad("must not be empty");
  if (version.size() > max_version)
    return bad("longer than 64 characters");
  for (char c : version)
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-')
      return bad("only A-Z, a-z, 0-9, '.', '_' and '-' are allowed");
  return {};
}

expected<layer_ref> parse_ref(const std::string& ref) {
  auto at = ref.rfind('@');
  if (at == std::string::npos)
    return invalid_argument("layer ref \"" + ref + "\": expected name@version");
  layer_ref out{ref.substr(0, at), ref.substr(at + 1)};
  if (auto st = validate_name(out.name); !st)
    return invalid_argument("layer ref \"" + ref + "\": " + st.err().message);
  if (auto st = validate_version(out.version); !st)
    return invalid_argument("layer ref \"" + ref + "\": " + st.err().message);
  return out;
}

} // namespace dsec::layers
