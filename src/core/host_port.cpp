// Parsing of `host:port` (grammar in host_port.hpp).
#include "core/host_port.hpp"

#include <charconv>

namespace dsec {

expected<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text,
                                                           bool allow_port_zero) {
  auto fail = [&](std::string_view why) {
    return invalid_argument("parse host:port '" + std::string(text) + "': " + std::string(why));
  };
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos)
      return fail("missing ']' after IPv6 address");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':')
      return fail("missing ':port' after ']'");
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return fail("missing ':port'");
    host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos)
      return fail("IPv6 addresses need brackets, e.g. [::1]:7070");
    port = text.substr(colon + 1);
  }
  if (host.empty())
    return fail("empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc{} || end != port.data() + port.size())
    return fail("port is not a number");
  if ((value == 0 && !allow_port_zero) || value > 65535)
    return fail(allow_port_zero ? "port out of range 0..65535" : "port out of range 1..65535");
  return std::pair<std::string, uint16_t>{std::string(host), static_cast<uint16_t>(value)};
}

} // namespace dsec
