// WWW-Authenticate challenges, token answers and docker config.json
// credentials (see auth.hpp). The challenge grammar is RFC 7235's:
// challenges separated by commas, each a scheme and comma-separated
// name=value parameters whose values may be quoted strings.
#include "registry/auth.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

namespace dsec::registry {

namespace {

using json = nlohmann::json;

bool is_tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+.^_`|~-/").find(c) != std::string_view::npos;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return out;
}

struct cursor {
  std::string_view s;
  size_t i = 0;
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t'))
      ++i;
  }
  bool done() const { return i >= s.size(); }
  std::string_view token() {
    size_t start = i;
    while (i < s.size() && is_tchar(s[i]))
      ++i;
    return s.substr(start, i - start);
  }
};

bool file_exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}

/// The host a config.json "auths" key names: "https://host/v1/" -> "host".
std::string key_host(std::string_view key) {
  if (auto p = key.find("://"); p != std::string_view::npos)
    key = key.substr(p + 3);
  if (auto p = key.find('/'); p != std::string_view::npos)
    key = key.substr(0, p);
  return lower(key);
}

bool is_docker_hub(const std::string& host) {
  return host == "docker.io" || host == "index.docker.io" || host == "registry-1.docker.io";
}

std::string percent_encode(std::string_view v) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

} // namespace

expected<std::vector<auth_challenge>> parse_challenges(std::string_view header) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("WWW-Authenticate \"" + std::string(header) + "\": " + why);
  };
  std::vector<auth_challenge> out;
  cursor c{header};
  for (;;) {
    while (!c.done() && (c.s[c.i] == ' ' || c.s[c.i] == '\t' || c.s[c.i] == ','))
      ++c.i;
    if (c.done())
      break;
    auto scheme = c.token();
    if (scheme.empty())
      return bad("expected an auth scheme at offset " + std::to_string(c.i));
    auth_challenge ch;
    ch.scheme = lower(scheme);
    for (;;) {
      c.skip_ws();
      while (!c.done() && c.s[c.i] == ',') {
        ++c.i;
        c.skip_ws();
      }
      if (c.done())
        break;
      size_t mark = c.i;
      auto name = c.token();
      c.skip_ws();
      if (name.empty() || c.done() || c.s[c.i] != '=') {
        c.i = mark;  // the next challenge's scheme (or a token68 we skip)
        if (name.empty())
          return bad("unexpected '" + std::string(1, c.s[c.i]) + "' at offset " +
                     std::to_string(c.i));
        break;
      }
      ++c.i;
      c.skip_ws();
      std::string value;
      if (!c.done() && c.s[c.i] == '"') {
        ++c.i;
        bool closed = false;
        while (!c.done()) {
          char ch2 = c.s[c.i++];
          if (ch2 == '\\' && !c.done()) {
            value += c.s[c.i++];
          } else if (ch2 == '"') {
            closed = true;
            break;
          } else {
            value += ch2;
          }
        }
        if (!closed)
          return bad("unterminated quoted value of \"" + std::string(name) + "\"");
      } else {
        // Unquoted: lenient, up to the next comma or blank (realms with ':').
        while (!c.done() && c.s[c.i] != ',' && c.s[c.i] != ' ' && c.s[c.i] != '\t')
          value += c.s[c.i++];
      }
      ch.params[lower(name)] = value;
    }
    out.push_back(std::move(ch));
  }
  if (out.empty())
    return bad("no challenge");
  return out;
}

expected<std::optional<credentials>> find_credentials(std::string_view text,
                                                      const std::string& file,
                                                      const std::string& host) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("registry credentials " + file + ": " + why);
  };
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return bad("not a JSON object");
  std::string want = lower(host);
  auto matches = [&](const std::string& key) {
    auto h = key_host(key);
    return h == want || (is_docker_hub(want) && is_docker_hub(h));
  };
  if (auto it = doc.find("credHelpers"); it != doc.end() && it->is_object())
    for (auto& [k, v] : it->items())
      if (matches(k))
        return bad("host " + host +
                   " uses a credential helper (credHelpers), which dsec does not run; put "
                   "\"auth\" or \"username\"/\"password\" under \"auths\"");
  auto auths = doc.find("auths");
  if (auths == doc.end())
    return std::optional<credentials>{};
  if (!auths->is_object())
    return bad("\"auths\" must be an object");
  for (auto& [key, entry] : auths->items()) {
    if (!matches(key))
      continue;
    if (!entry.is_object())
      return bad("auths[\"" + key + "\"] must be an object");
    if (entry.contains("identitytoken"))
      return bad("auths[\"" + key +
                 "\"] holds an identitytoken (an OAuth2 refresh token), which dsec does not "
                 "support; use \"auth\" or \"username\"/\"password\"");
    credentials cr;
    if (auto a = entry.find("auth"); a != entry.end()) {
      if (!a->is_string())
        return bad("auths[\"" + key + "\"].auth must be a string");
      auto decoded = base64_decode(a->get<std::string>());
      if (!decoded)
        return bad("auths[\"" + key + "\"].auth is not base64");
      auto colon = decoded->find(':');
      if (colon == std::string::npos)
        return bad("auths[\"" + key + "\"].auth must decode to user:password");
      cr.username = decoded->substr(0, colon);
      cr.password = decoded->substr(colon + 1);
    } else {
      auto u = entry.find("username");
      auto p = entry.find("password");
      if (u == entry.end() || p == entry.end() || !u->is_string() || !p->is_string())
        return bad("auths[\"" + key + "\"] needs \"auth\" or string \"username\" and \"password\"");
      cr.username = u->get<std::string>();
      cr.password = p->get<std::string>();
    }
    if (cr.username.empty())
      return bad("auths[\"" + key + "\"] has an empty user name");
    return std::optional<credentials>{std::move(cr)};
  }
  if (auto it = doc.find("credsStore"); it != doc.end() && it->is_string() &&
                                        !it->get<std::string>().empty())
    return std::optional<credentials>{};  // a store for others; this host is anonymous
  return std::optional<credentials>{};
}

expected<std::string> credentials_file(const std::string& auth_file) {
  if (!auth_file.empty()) {
    if (!file_exists(auth_file))
      return not_found("registry credentials " + auth_file + ": no such file");
    return auth_file;
  }
  if (const char* d = std::getenv("DOCKER_CONFIG"); d && *d) {
    std::string p = std::string(d) + "/config.json";
    if (file_exists(p))
      return p;
  }
  if (const char* h = std::getenv("HOME"); h && *h) {
    std::string p = std::string(h) + "/.docker/config.json";
    if (file_exists(p))
      return p;
  }
  return std::string();
}

std::string basic_authorization(const credentials& c) {
  return "Basic " + base64_encode(c.username + ":" + c.password);
}

expected<std::string> token_url(const auth_challenge& bearer, const std::string& scope) {
  auto realm = bearer.param("realm");
  if (realm.empty())
    return invalid_argument("Bearer challenge without a realm");
  if (realm.rfind("https://", 0) != 0 && realm.rfind("http://", 0) != 0)
    return invalid_argument("Bearer realm \"" + realm + "\" is not an http(s) URL");
  std::string url = realm;
  char sep = realm.find('?') == std::string::npos ? '?' : '&';
  if (auto service = bearer.param("service"); !service.empty()) {
    url += sep + std::string("service=") + percent_encode(service);
    sep = '&';
  }
  if (!scope.empty())
    url += sep + std::string("scope=") + percent_encode(scope);
  return url;
}

expected<token_answer> parse_token_answer(std::string_view body) {
  auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return invalid_argument("token server answer is not a JSON object");
  token_answer out;
  for (const char* k : {"token", "access_token"}) {
    if (auto it = doc.find(k); it != doc.end() && it->is_string() && !it->get<std::string>().empty()) {
      out.token = it->get<std::string>();
      break;
    }
  }
  if (out.token.empty())
    return invalid_argument("token server answer has no \"token\"");
  if (auto it = doc.find("expires_in"); it != doc.end() && it->is_number_integer()) {
    auto v = it->get<int64_t>();
    // The spec's floor: a token shorter than 60 s is taken as 60 s.
    out.expires_in = v < 60 ? 60 : v;
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string in;
  for (char c : text)
    if (c != '\n' && c != '\r' && c != ' ')
      in += c;
  while (in.size() % 4 != 0)
    in += '=';
  if (in.empty())
    return std::string();
  std::string out(3 * in.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0)
    return std::nullopt;
  // EVP_DecodeBlock counts padding as zero bytes: drop them.
  size_t pad = 0;
  if (in.size() >= 1 && in[in.size() - 1] == '=')
    ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=')
    ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

} // namespace dsec::registry
