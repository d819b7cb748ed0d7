// The command-line side of registry_options: `--registry-mirror` values and
// the insecure-host check every request makes before choosing http://.
#include "registry/registry_options.hpp"

#include <algorithm>

namespace dsec::registry {

namespace {

/// A "host[:port]" as references and --insecure-registry write it: no
/// scheme, no path, no spaces.
bool plain_host(std::string_view h) {
  if (h.empty())
    return false;
  for (char c : h) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_';
    if (!ok)
      return false;
  }
  return true;
}

} // namespace

status add_mirror_option(registry_options& opts, std::string_view value) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("--registry-mirror \"" + std::string(value) + "\": " + why);
  };
  auto eq = value.find('=');
  if (eq == std::string_view::npos)
    return bad("expected REGISTRY=MIRROR[,MIRROR...]");
  auto reg = value.substr(0, eq);
  if (!plain_host(reg))
    return bad("registry \"" + std::string(reg) + "\" must be host[:port] (no scheme, no path)");
  auto list = value.substr(eq + 1);
  if (list.empty())
    return bad("names no mirror");
  std::vector<std::string> mirrors;
  size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    auto m = list.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                 : comma - start);
    if (!plain_host(m))
      return bad("mirror \"" + std::string(m) + "\" must be host[:port] (no scheme, no path)");
    mirrors.emplace_back(m);
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  auto& dst = opts.mirrors[std::string(reg)];
  for (auto& m : mirrors)
    if (std::find(dst.begin(), dst.end(), m) == dst.end())
      dst.push_back(std::move(m));
  return {};
}

bool is_insecure(const registry_options& opts, std::string_view host) {
  return std::find(opts.insecure_hosts.begin(), opts.insecure_hosts.end(), host) !=
         opts.insecure_hosts.end();
}

} // namespace dsec::registry
