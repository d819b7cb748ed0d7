// Registry authentication as pure functions: the `WWW-Authenticate`
// challenges a registry answers 401 with (Basic, and Bearer with the realm,
// service and scope of the token flow), the token server's answer, and the
// credentials of a docker-style config.json. registry_client.cpp does the
// HTTP; everything here is text in, values out, and unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec::registry {

/// One challenge of a WWW-Authenticate header.
struct auth_challenge {
  /// Lower-cased: "basic" or "bearer" (others are kept but not answered).
  std::string scheme;
  /// Parameters with lower-cased names; quoted values unquoted.
  std::map<std::string, std::string> params;

  [[nodiscard]] std::string param(const std::string& name) const {
    auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
  }
};

/// Parses a WWW-Authenticate value: one or more challenges
/// (`Bearer realm="https://a/token",service="reg",scope="repository:x:pull"`,
/// `Basic realm="R"`), quoted values may hold commas and \-escapes.
/// invalid_argument names the malformed part.
expected<std::vector<auth_challenge>> parse_challenges(std::string_view header);

/// User name and password for one registry.
struct credentials {
  std::string username;
  std::string password;
};

/// The credentials config.json `text` (read from `file`, for messages) holds
/// for registry `host` ("host:port" or "docker.io"): "auths" keyed by the
/// host or by a URL naming it ("https://host/v1/"); "auth" (base64 of
/// user:password) or "username"/"password". nullopt when the host has no
/// entry. An "identitytoken" entry is refused (invalid_argument: OAuth2
/// refresh tokens are not supported), as is "credsStore"/"credHelpers" for
/// the host (external helpers are not run).
expected<std::optional<credentials>> find_credentials(std::string_view text,
                                                      const std::string& file,
                                                      const std::string& host);

/// The config.json to read for `auth_file` (--registry-auth): that file;
/// else $DOCKER_CONFIG/config.json; else $HOME/.docker/config.json; empty
/// when none of the defaults exists (anonymous). A named file that is
/// missing is not_found.
expected<std::string> credentials_file(const std::string& auth_file);

/// "Basic <base64(user:password)>".
std::string basic_authorization(const credentials& c);

/// The token request URL of a Bearer challenge: realm?service=..&scope=..
/// (each query value percent-encoded). invalid_argument when the challenge
/// has no realm or the realm is not http(s).
expected<std::string> token_url(const auth_challenge& bearer, const std::string& scope);

/// A token server's answer.
struct token_answer {
  std::string token;
  /// Seconds the token is valid; the spec's default is 60.
  int64_t expires_in = 60;
};

/// Parses the token server's JSON ("token" or "access_token", "expires_in").
expected<token_answer> parse_token_answer(std::string_view body);

/// Standard base64 (with padding) and its inverse (nullopt on bad input).
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

} // namespace dsec::registry
