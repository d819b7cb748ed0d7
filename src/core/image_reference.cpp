// The image reference grammar (see image_reference.hpp): split off the
// digest, then the registry (a first component that looks like a host), then
// the tag, and check each part against its rule; docker.io references get
// their "library/" prefix here so two spellings of one image compare equal.
#include "core/image_reference.hpp"

#include <cstddef>

namespace dsec::registry {

namespace {

constexpr size_t max_repository = 255;
constexpr size_t max_tag = 128;
constexpr const char* default_registry = "docker.io";

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

/// True when the first path component of a name is a registry host.
bool looks_like_host(std::string_view first) {
  return first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos ||
         first == "localhost" || (!first.empty() && first.front() == '[');
}

/// [a-z0-9]+ joined by '.', '_', '__' or runs of '-'.
bool valid_component(std::string_view c) {
  if (c.empty() || !is_lower_alnum(c.front()) || !is_lower_alnum(c.back()))
    return false;
  for (size_t i = 0; i < c.size(); ++i) {
    char ch = c[i];
    if (is_lower_alnum(ch) || ch == '-')
      continue;
    if (ch == '.' || ch == '_') {
      // One separator between alnums; "__" is the only doubled one.
      bool dunder = ch == '_' && i + 1 < c.size() && c[i + 1] == '_';
      size_t next = i + (dunder ? 2 : 1);
      if (next >= c.size() || !is_lower_alnum(c[next]) || !is_lower_alnum(c[i - 1]))
        return false;
      i = next - 1;
      continue;
    }
    return false;
  }
  return true;
}

status check_port(std::string_view port, std::string_view whole) {
  if (port.empty() || port.size() > 5)
    return invalid_argument("image reference \"" + std::string(whole) +
                            "\": registry port must be 1-65535");
  unsigned long v = 0;
  for (char c : port) {
    if (!is_digit(c))
      return invalid_argument("image reference \"" + std::string(whole) +
                              "\": registry port must be 1-65535");
    v = v * 10 + static_cast<unsigned long>(c - '0');
  }
  if (v == 0 || v > 65535)
    return invalid_argument("image reference \"" + std::string(whole) +
                            "\": registry port must be 1-65535");
  return {};
}

status check_registry(std::string_view host, std::string_view whole) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("image reference \"" + std::string(whole) + "\": registry \"" +
                            std::string(host) + "\" " + why);
  };
  std::string_view name = host;
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    if (close == std::string_view::npos || close == 1)
      return bad("has an unterminated IPv6 address");
    for (char c : host.substr(1, close - 1))
      if (!is_lower_hex(c) && !(c >= 'A' && c <= 'F') && c != ':' && c != '.')
        return bad("has an invalid IPv6 address");
    auto rest = host.substr(close + 1);
    if (rest.empty())
      return {};
    if (rest.front() != ':')
      return bad("has text after the IPv6 address");
    return check_port(rest.substr(1), whole);
  }
  if (auto colon = host.find(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (auto st = check_port(port, whole); !st)
      return st;
  }
  if (name.empty())
    return bad("has no host name");
  if (name.front() == '.' || name.back() == '.' || name.front() == '-' || name.back() == '-')
    return bad("must start and end with a letter or digit");
  for (char c : name)
    if (!is_alnum(c) && c != '.' && c != '-')
      return bad("may hold only letters, digits, '.' and '-' (and :port)");
  return {};
}

status check_repository(std::string_view repo, std::string_view whole) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("image reference \"" + std::string(whole) + "\": repository \"" +
                            std::string(repo) + "\" " + why);
  };
  if (repo.empty())
    return bad("is empty");
  if (repo.size() > max_repository)
    return bad("is longer than 255 characters");
  size_t start = 0;
  while (start <= repo.size()) {
    auto slash = repo.find('/', start);
    auto comp = repo.substr(start, slash == std::string_view::npos ? std::string_view::npos
                                                                    : slash - start);
    if (!valid_component(comp))
      return bad("component \"" + std::string(comp) +
                 "\" must be lower-case letters and digits, joined by '.', '_', '__' or '-'");
    if (slash == std::string_view::npos)
      break;
    start = slash + 1;
  }
  return {};
}

status check_tag(std::string_view tag, std::string_view whole) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("image reference \"" + std::string(whole) + "\": tag \"" +
                            std::string(tag) + "\" " + why);
  };
  if (tag.empty())
    return bad("is empty (drop the ':' or name a tag)");
  if (tag.size() > max_tag)
    return bad("is longer than 128 characters");
  if (!is_alnum(tag.front()) && tag.front() != '_')
    return bad("must start with a letter, digit or '_'");
  for (char c : tag)
    if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
      return bad("may hold only letters, digits, '_', '.' and '-'");
  return {};
}

status check_digest(std::string_view digest, std::string_view whole) {
  constexpr std::string_view prefix = "sha256:";
  if (digest.substr(0, prefix.size()) != prefix)
    return invalid_argument("image reference \"" + std::string(whole) + "\": digest \"" +
                            std::string(digest) + "\" must be sha256:<64 lower-case hex>");
  auto hex = digest.substr(prefix.size());
  bool ok = hex.size() == 64;
  for (char c : hex)
    ok = ok && is_lower_hex(c);
  if (!ok)
    return invalid_argument("image reference \"" + std::string(whole) + "\": digest \"" +
                            std::string(digest) + "\" must be sha256:<64 lower-case hex>");
  return {};
}

} // namespace

std::string image_reference::api_host() const {
  return registry == default_registry ? std::string("registry-1.docker.io") : registry;
}

std::string image_reference::str() const {
  std::string out = registry + "/" + repository;
  if (!tag.empty())
    out += ":" + tag;
  if (!digest.empty())
    out += "@" + digest;
  return out;
}

expected<image_reference> parse_image_reference(std::string_view text) {
  if (text.empty())
    return invalid_argument("image reference is empty");
  if (text.size() > 1024)
    return invalid_argument("image reference is longer than 1024 characters");
  for (char c : text)
    if (static_cast<unsigned char>(c) <= ' ' || static_cast<unsigned char>(c) >= 0x7f)
      return invalid_argument("image reference \"" + std::string(text) +
                              "\": spaces and control characters are not allowed");
  image_reference out;
  std::string_view name = text;
  if (auto at = text.find('@'); at != std::string_view::npos) {
    auto digest = text.substr(at + 1);
    if (auto st = check_digest(digest, text); !st)
      return st.err();
    out.digest = std::string(digest);
    name = text.substr(0, at);
  }
  if (auto slash = name.find('/');
      slash != std::string_view::npos && looks_like_host(name.substr(0, slash))) {
    auto host = name.substr(0, slash);
    if (auto st = check_registry(host, text); !st)
      return st.err();
    out.registry = std::string(host);
    name = name.substr(slash + 1);
  } else {
    out.registry = default_registry;
  }
  // After the registry is gone, a ':' can only start the tag.
  if (auto colon = name.find(':'); colon != std::string_view::npos) {
    auto tag = name.substr(colon + 1);
    if (auto st = check_tag(tag, text); !st)
      return st.err();
    out.tag = std::string(tag);
    name = name.substr(0, colon);
  }
  if (auto st = check_repository(name, text); !st)
    return st.err();
  out.repository = std::string(name);
  if (out.registry == "index.docker.io" || out.registry == "registry-1.docker.io")
    out.registry = default_registry;
  if (out.registry == default_registry && out.repository.find('/') == std::string::npos)
    out.repository = "library/" + out.repository;
  if (out.tag.empty() && out.digest.empty())
    out.tag = "latest";
  return out;
}

bool looks_like_image_reference(std::string_view text) {
  if (text.find("@sha256:") != std::string_view::npos)
    return true;
  auto slash = text.find('/');
  if (slash != std::string_view::npos && looks_like_host(text.substr(0, slash)))
    return true;
  auto at = text.find('@');
  return text.substr(0, at).find(':') != std::string_view::npos;
}

} // namespace dsec::registry
