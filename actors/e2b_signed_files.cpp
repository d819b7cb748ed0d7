// Signed file URLs of E2B's secure sandboxes (e2b_gateway.hpp; the signature
// scheme in api/e2b_signature.hpp). The URL names its sandbox by its host
// (`49983-<id>.<domain>`, the SDK's default) or, when the SDK is pointed at
// the node itself (E2B_SANDBOX_URL), not at all: then the signature is the
// name, matched against the envd token of each of the node's sandboxes. A
// match is served as envd's /files; an expired one is 401 "signature is
// already expired" and no match 401 "invalid signature", as E2B's envd.
#include "actors/e2b_gateway.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "api/api_keys.hpp"
#include "api/e2b_codec.hpp"
#include "api/e2b_signature.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

constexpr auto call_timeout = call_wait(hop::front);

/// True if `r` is signed with sandbox `id`'s envd token under one of `keys`.
bool signed_for(const std::vector<std::string>& keys, const signed_request& r,
                const std::string& id) {
  bool ok = false;
  for (auto& k : keys)
    ok |= signature_matches(r, envd_token(k, id));
  return ok;
}

void serve_signed(const gateway_ref& g, const http_call& c, const signed_request& r,
                  const std::string& id, const std::string& path,
                  const std::map<std::string, std::string>& query) {
  if (r.expiration && *r.expiration < now_ms() / 1000)
    return answer(c, 401, error_body(401, "signature is already expired"));
  serve_envd(g, c, id, path, query);
}

void invalid(const http_call& c) { answer(c, 401, error_body(401, "invalid signature")); }

} // namespace

void serve_signed_files(const gateway_ref& g, const http_call& c, const std::string& path,
                        const std::map<std::string, std::string>& query) {
  const auto& keys = g.ctx->config.api_keys;
  auto r = parse_signed_request(c->method, query);
  if (!r)
    return answer(c, 400, error_body(400, r.err().message));
  if (keys.empty())
    return answer(c, 400, error_body(400, "signed file URL: this node has no API keys "
                                          "(--api-key-file), so its sandboxes have no "
                                          "envdAccessToken to sign with"));
  std::string id = c->header("e2b-sandbox-id");
  if (id.empty())
    id = envd_host_sandbox(c->header("host"), g.ctx->config.sandbox_domain);
  if (!id.empty())
    return signed_for(keys, *r, id) ? serve_signed(g, c, *r, id, path, query) : invalid(c);
  auto gref = g;
  g.self->request(g.front, call_timeout, list_atom::value, std::map<std::string, std::string>{})
    .then(
      [gref, c, r = *r, path, query](std::vector<sandbox_info>& all) {
        const auto& keys = gref.ctx->config.api_keys;
        for (auto& info : all)
          if (signed_for(keys, r, info.id))
            return serve_signed(gref, c, r, info.id, path, query);
        invalid(c);
      },
      [c](caf::error& err) { reply_error(c, from_caf(err)); });
}

} // namespace dsec::e2b
