// Ports on the REST gateway (see gateway_ports.hpp): which requests name a
// port, who may send them, where the owner serves the port, and the request
// the port (or the owner's gateway) gets.
#include "actors/gateway_ports.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <any>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/gateway_trajectory.hpp"
#include "actors/operations.hpp"
#include "api/api_keys.hpp"
#include "api/e2b_codec.hpp"
#include "api/gateway_routes.hpp"
#include "backends/backend.hpp"
#include "core/clock.hpp"
#include "core/host_mask.hpp"
#include "core/host_port.hpp"
#include "core/json_codec.hpp"
#include "core/port_route.hpp"

namespace dsec::ports {

namespace {

/// Marks a request one gateway relayed to the sandbox's owner: the owner
/// serves it itself, never relays it again (a loop needs two nodes that
/// disagree about the owner).
constexpr const char* forwarded_header = "x-dsec-forwarded";

/// A request that names a port.
struct port_call {
  std::string id;
  /// The port as sent (checked when parsed to a number).
  std::string port_text;
  /// The target the port sees.
  std::string target;
};

std::string lower(std::string s) {
  for (auto& ch : s)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

/// /v1/sandboxes/{id}/ports/{port}[/{path...}][?query]
std::optional<port_call> path_form(const std::string& target) {
  static constexpr std::string_view prefix = "/v1/sandboxes/";
  if (target.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  auto id_end = target.find('/', prefix.size());
  static constexpr std::string_view ports = "/ports/";
  if (id_end == std::string::npos || target.compare(id_end, ports.size(), ports) != 0)
    return std::nullopt;
  auto id = url_decode(std::string_view{target}.substr(prefix.size(), id_end - prefix.size()));
  if (!id || id->empty())
    return std::nullopt;
  auto port_at = id_end + ports.size();
  auto port_end = target.find_first_of("/?", port_at);
  if (port_end == std::string::npos)
    port_end = target.size();
  port_call pc;
  pc.id = std::move(*id);
  pc.port_text = target.substr(port_at, port_end - port_at);
  auto rest = target.substr(port_end);
  pc.target = rest.empty() || rest[0] == '?' ? "/" + rest : rest;
  return pc;
}

/// Host `{port}-{id}.{domain}`, the domain compared with and without its
/// :port (so --sandbox-domain localhost takes Host 8000-ID.localhost:7070).
std::optional<port_call> host_form(const std::string& host_header, const std::string& domain,
                                   const std::string& target) {
  if (domain.empty() || host_header.empty())
    return std::nullopt;
  auto strip_port = [](std::string h) {
    if (auto colon = h.rfind(':'); colon != std::string::npos && h.find(']') == std::string::npos)
      h.resize(colon);
    return h;
  };
  auto host = lower(host_header);
  std::string prefix;
  for (auto& [h, d] : {std::pair{host, domain}, std::pair{strip_port(host), strip_port(domain)}}) {
    auto suffix = "." + d;
    if (h.size() > suffix.size() && h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0) {
      prefix = h.substr(0, h.size() - suffix.size());
      break;
    }
  }
  auto dash = prefix.find('-');
  if (prefix.empty() || dash == std::string::npos || dash == 0)
    return std::nullopt;
  port_call pc;
  pc.port_text = prefix.substr(0, dash);
  pc.id = prefix.substr(dash + 1);
  pc.target = target.empty() ? "/" : target;
  return pc;
}

/// E2b-Sandbox-Id and E2b-Sandbox-Port, for any port but envd's.
std::optional<port_call> header_form(const http_exchange& c) {
  auto id = c.header("e2b-sandbox-id");
  auto port = c.header("e2b-sandbox-port");
  if (id.empty() || port.empty() || port == e2b::envd_port)
    return std::nullopt;
  return port_call{id, port, c.target.empty() ? "/" : c.target};
}

std::optional<port_call> classify(const http_exchange& c, const node_config& cfg) {
  if (auto pc = path_form(c.target))
    return pc;
  if (auto pc = header_form(c))
    return pc;
  // envd's port by Host is the node's own E2B API (e2b_gateway.hpp), not a port.
  auto pc = host_form(c.header("host"), cfg.sandbox_domain, c.target);
  if (pc && pc->port_text == e2b::envd_port)
    return std::nullopt;
  return pc;
}

/// 1..65535, digits only.
std::optional<int32_t> parse_port(const std::string& text) {
  if (text.empty() || text.size() > 5)
    return std::nullopt;
  int32_t v = 0;
  for (char ch : text) {
    if (!std::isdigit(static_cast<unsigned char>(ch)))
      return std::nullopt;
    v = v * 10 + (ch - '0');
  }
  if (v < 1 || v > 65535)
    return std::nullopt;
  return v;
}

bool our_key(const node_config& cfg, const http_exchange& c) {
  return key_matches(cfg.api_keys, c.header("x-api-key"))
         || key_matches(cfg.api_keys, bearer_key(c.header("authorization")));
}

/// The node's API keys or the sandbox's envd token (the E2B SDKs send it).
bool authorized(const node_config& cfg, const http_exchange& c, const std::string& id) {
  return cfg.api_keys.empty() || our_key(cfg, c)
         || envd_token_matches(cfg.api_keys, id, c.header("x-access-token"));
}

void deny(const http_call& c, int status, const char* code, const std::string& message) {
  http_answer a;
  a.status = status;
  a.body = std::string{"{\"error\":{\"code\":\""} + code + "\",\"message\":"
           + nlohmann::json(message).dump() + "}}";
  if (status == 401)
    a.headers.emplace_back("WWW-Authenticate", "Bearer");
  c->respond(std::move(a));
}

bool upgrade_requested(const http_exchange& c) {
  return !c.header("upgrade").empty()
         && lower(c.header("connection")).find("upgrade") != std::string::npos;
}

/// The request as the port (or, with `to_owner`, the owner's gateway) gets
/// it: hop-by-hop headers replaced by this hop's own, and the node's
/// credentials and routing headers kept only for the owner.
relay_request upstream_request(const http_exchange& c, const node_config& cfg,
                               const std::string& target, bool to_owner, std::string what,
                               const std::string& host = {}) {
  relay_request r;
  r.upgrade = upgrade_requested(c);
  r.head = c.method == "HEAD";
  r.what = std::move(what);
  std::string& out = r.bytes;
  out.reserve(512 + c.body.size());
  out += c.method + " " + (to_owner ? c.target : target) + " HTTP/1.1\r\n";
  bool drop_key = !to_owner && !cfg.api_keys.empty() && our_key(cfg, c);
  for (auto& [name, value] : c.headers) {
    if (name == "connection" || name == "keep-alive" || name == "proxy-connection"
        || name == "te" || name == "trailer" || name == "transfer-encoding" || name == "upgrade"
        || name == "content-length" || name == forwarded_header)
      continue;
    if (!to_owner
        && (name == "e2b-sandbox-id" || name == "e2b-sandbox-port" || name == "x-access-token"
            || name == "e2b-traffic-access-token"
            || (drop_key && (name == "x-api-key" || name == "authorization"))))
      continue;
    if (!host.empty() && name == "host")
      continue; // replaced by the sandbox's host mask below
    out += name + ": " + value + "\r\n";
  }
  if (!host.empty())
    out += "Host: " + host + "\r\n";
  // Any other request leaves the connection open (HTTP/1.1's default) for
  // the next one to the same place (actors/upstream_pool.hpp).
  if (r.upgrade)
    out += "Connection: Upgrade\r\nUpgrade: " + c.header("upgrade") + "\r\n";
  if (!c.body.empty() || c.method == "POST" || c.method == "PUT" || c.method == "PATCH")
    out += "Content-Length: " + std::to_string(c.body.size()) + "\r\n";
  if (to_owner)
    out += std::string{forwarded_header} + ": " + cfg.node_id + "\r\n";
  out += "\r\n";
  out += c.body;
  return r;
}

/// A nonblocking TCP socket connecting to host:port (an IP or a name).
expected<sys::unique_fd> dial_tcp(const std::string& address) {
  auto hp = parse_host_port(address);
  if (!hp)
    return hp.err();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto host = hp->first == "localhost" ? std::string{"127.0.0.1"} : hp->first;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(hp->second).c_str(), &hints, &res);
      rc != 0)
    return unavailable("resolve " + address + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
  sys::unique_fd fd{::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (!fd)
    return sys_error("socket", address, errno);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd.get(), res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS)
    return sys_error("connect", address, errno);
  return std::move(fd);
}

/// Local sandboxes whose actor a gateway remembers (port_owners); past it
/// the memory starts over.
constexpr size_t max_owners = 4096;

const std::string no_key =
    ": a valid API key (X-API-Key: KEY or Authorization: Bearer KEY) or the sandbox's "
    "X-Access-Token is required";

/// The owner answered: check the traffic token, then relay to the port
/// here or to the owner's gateway.
void on_route(const node_config& cfg, const http_call& c, const port_call& pc, int32_t port,
              port_route& route, bool authed) {
  auto what = "port " + std::to_string(port) + " of sandbox " + pc.id;
  if (!authed && !route.public_ports)
    return deny(c, 401, "unauthenticated", what + no_key);
  if (!route.traffic_token.empty()) {
    auto token = c->header("e2b-traffic-access-token");
    if (token.empty())
      return deny(c, 401, "unauthenticated",
                  what + ": the sandbox requires header e2b-traffic-access-token "
                         "(the trafficAccessToken of its create answer)");
    if (!key_matches({route.traffic_token}, token))
      return deny(c, 403, "permission_denied", what + ": wrong e2b-traffic-access-token");
  }
  if (route.node != cfg.node_id) {
    if (!c->header(forwarded_header).empty())
      return gateway_reply_error(c, unavailable(what + ": node " + c->header(forwarded_header)
                                                + " relayed it here, but node " + route.node
                                                + " owns it"));
    auto req = upstream_request(*c, cfg, pc.target, true,
                                what + " through node " + route.node + " (" + route.rest + ")");
    // Kept-alive connections to the owner's REST port are shared by all its sandboxes.
    req.pool_key = "node " + route.rest;
    req.dial = [rest = route.rest, what = req.what]() -> expected<sys::unique_fd> {
      auto fd = dial_tcp(rest);
      if (!fd)
        return error{errc::unavailable, what + ": " + fd.err().message};
      return fd;
    };
    return c->relay(sys::unique_fd{}, std::move(req));
  }
  auto sb = route.local.lock();
  if (!sb)
    return gateway_reply_error(c, not_found("sandbox " + pc.id + " not found (destroyed)"));
  // E2B's maskRequestHost: the Host the port sees (core/host_mask.hpp).
  auto host = route.host_mask.empty() ? std::string{} : masked_host(route.host_mask, port);
  auto req = upstream_request(*c, cfg, pc.target, false, what, host);
  // The backend handle is part of the key: a connection never outlives the
  // sandbox instance it was opened into (a destroyed one's close on their own).
  char handle[32];
  std::snprintf(handle, sizeof(handle), "%p", static_cast<void*>(sb.get()));
  req.pool_key = "sandbox " + pc.id + " " + handle + " " + std::to_string(port);
  // The dial's error is the answer: 404 for a sandbox gone, 501 for a
  // backend without ports (naming itself), else 502 (actors/http_relay.cpp).
  req.dial = [weak = route.local, port, id = pc.id]() -> expected<sys::unique_fd> {
    auto sb = weak.lock();
    if (!sb)
      return not_found("sandbox " + id + " not found (destroyed)");
    return sb->open_port(static_cast<uint16_t>(port));
  };
  c->relay(sys::unique_fd{}, std::move(req));
}

void ask_front(gateway_actor_ptr self, const http_call& c, const port_call& pc, int32_t port,
               bool authed);

/// Asks the sandbox's actor directly, when this node owns the sandbox and a
/// port request reached it before (two messages instead of four). The
/// actor's answer is as fresh as through the front: a paused sandbox is
/// resumed, and every access check runs on it. Any error (the actor gone
/// with its sandbox, destroyed, moved) forgets the actor and asks the
/// front, whose answer (404, 502, ...) is the one the client gets.
void ask_owner(gateway_actor_ptr self, const http_call& c, const port_call& pc, int32_t port,
               bool authed, const sandbox_actor& owner) {
  auto ctx = self->state.ctx;
  auto wait = caf::duration{*ops::port_op::deadline(ops::waits_of(hop::front), port)};
  self->request(owner, wait, port_atom::value, port)
    .then([ctx, c, authed, pc, port](port_route& route) {
            on_route(ctx->config, c, pc, port, route, authed);
          },
          [self, c, authed, pc, port](caf::error&) {
            self->state.port_owners.erase(pc.id);
            ask_front(self, c, pc, port, authed);
          });
}

void ask_front(gateway_actor_ptr self, const http_call& c, const port_call& pc, int32_t port,
               bool authed) {
  auto ctx = self->state.ctx;
  auto wait = caf::duration{*ops::port_op::deadline(ops::waits_of(hop::front), port)};
  self->request(self->state.front, wait, port_atom::value, pc.id, port)
    .then([self, ctx, c, authed, pc, port](port_route& route) {
            auto& owners = self->state.port_owners;
            auto* actor = std::any_cast<caf::actor>(&route.actor);
            if (route.node == ctx->config.node_id && actor && *actor) {
              if (owners.size() >= max_owners)
                owners.clear();
              owners[pc.id] = caf::actor_cast<sandbox_actor>(*actor);
            }
            on_route(ctx->config, c, pc, port, route, authed);
          },
          [c, authed, what = "port " + pc.port_text.substr(0, 16) + " of sandbox "
                             + pc.id.substr(0, 256)](caf::error& err) {
            if (!authed)
              return deny(c, 401, "unauthenticated", what + no_key);
            gateway_reply_error(c, from_caf(err));
          });
}

} // namespace

bool dispatch(gateway_actor_ptr self, const http_call& c) {
  const auto& cfg = self->state.ctx->config;
  auto pc = classify(*c, cfg);
  if (!pc)
    return false;
  // Without a key only a sandbox whose ports are public answers; the owner
  // says which, and a keyless caller learns nothing else (401, not 404).
  bool authed = authorized(cfg, *c, pc->id);
  auto port = parse_port(pc->port_text);
  if (!port) {
    gateway_reply_error(c, invalid_argument("port \"" + pc->port_text.substr(0, 16)
                                            + "\" of sandbox " + pc->id.substr(0, 256)
                                            + ": must be a number between 1 and 65535"));
    return true;
  }
  if (auto it = self->state.port_owners.find(pc->id); it != self->state.port_owners.end())
    ask_owner(self, c, *pc, *port, authed, it->second);
  else
    ask_front(self, c, *pc, *port, authed);
  return true;
}

} // namespace dsec::ports
