// Host masks (host_mask.hpp).
#include "core/host_mask.hpp"

#include <cctype>
#include <cstdio>

namespace dsec {

namespace {

constexpr std::string_view port_var = "${PORT}";

} // namespace

status check_host_mask(std::string_view mask, const std::string& field) {
  if (mask.empty() || mask.size() > 255)
    return invalid_argument(field + ": must be 1 to 255 bytes, got "
                            + std::to_string(mask.size()));
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask.compare(i, port_var.size(), port_var) == 0) {
      i += port_var.size() - 1;
      continue;
    }
    auto c = static_cast<unsigned char>(mask[i]);
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']')
      continue;
    char shown[8];
    std::snprintf(shown, sizeof(shown), c < 0x20 || c >= 0x7f ? "\\x%02x" : "%c", c);
    return invalid_argument(field + " \"" + std::string{mask.substr(0, 100)}
                            + "\": character '" + shown + "' at " + std::to_string(i)
                            + " (a host takes letters, digits, . - _ : [ ] and ${PORT})");
  }
  return {};
}

std::string masked_host(std::string_view mask, int port) {
  std::string out;
  auto p = std::to_string(port);
  for (size_t i = 0; i < mask.size();) {
    if (mask.compare(i, port_var.size(), port_var) == 0) {
      out += p;
      i += port_var.size();
    } else {
      out += mask[i++];
    }
  }
  return out;
}

} // namespace dsec
