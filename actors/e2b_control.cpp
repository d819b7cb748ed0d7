// E2B control plane (e2b_gateway.hpp): create, connect, get, list, kill,
// timeout, pause, metrics, as the `e2b` SDK calls them, routed by one table
// (control_routes), answered in E2B's shapes and
// with the status codes its SDK maps (404 not found, 409 already paused, 429
// with an integer Retry-After, 401 without a valid X-API-Key).
#include "actors/e2b_gateway.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "api/api_keys.hpp"
#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "api/e2b_codec.hpp"
#include "api/e2b_create.hpp"
#include "api/e2b_ports.hpp"
#include "core/port_route.hpp"
#include "api/gateway_routes.hpp"
#include "actors/operations.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/image_reference.hpp"
#include "core/inspect.hpp"
#include "layers/aliases.hpp"

namespace dsec::e2b {

namespace {

using namespace std::chrono_literals;

/// A create waits for layers to mount and init to start; a stuck backend
/// answers 504 after this. Front-hop bounds (core/clock.hpp): longer than
/// placement's waits on a peer, so a slow peer yields placement's error.
constexpr auto create_timeout = create_wait(hop::front);
constexpr auto call_timeout = call_wait(hop::front);

void reply_error(const http_call& c, const error& err) {
  int status = http_status(err.code);
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 429)
    headers.emplace_back("Retry-After", "1");
  answer(c, status, error_body(status, err.message), "application/json", std::move(headers));
}

auto on_error(const http_call& c) {
  return [c](caf::error& err) { reply_error(c, from_caf(err)); };
}

void no_content(const http_call& c) { answer(c, 204, "", "application/json"); }

bool parse_query(std::string_view q, std::map<std::string, std::string>& out) {
  auto items = query_items(q);
  if (!items)
    return false;
  for (auto& [k, v] : *items)
    out[k] = std::move(v);
  return true;
}

bool api_key_ok(const node_config& cfg, const http_call& c) {
  return cfg.api_keys.empty() || key_matches(cfg.api_keys, c->header("x-api-key"))
         || key_matches(cfg.api_keys, bearer_key(c->header("authorization")));
}

void create_from(const gateway_ref& g, const http_call& c, create_request req,
                 std::vector<std::string> layers, std::string image = {}) {
  sandbox_spec spec;
  spec.layers = std::move(layers);
  spec.image = std::move(image);
  spec.ttl_s = req.timeout_s;
  spec.labels = std::move(req.metadata);
  spec.labels[template_label] = req.template_id;
  spec.env = std::move(req.env);
  // Lifecycle, network and every other option: mapped or refused by name.
  if (auto st = apply_create_options(c->body, spec, !g.ctx->config.api_keys.empty()); !st)
    return reply_error(c, st.err());
  // Ports (issue 26 part 3): network.allowPublicTraffic false gives the
  // sandbox a traffic token (api/e2b_ports.hpp).
  auto traffic = traffic_token_of_create(c->body);
  if (!traffic)
    return reply_error(c, traffic.err());
  if (!traffic->empty())
    spec.labels[traffic_token_label] = std::move(*traffic);
  // E2B's ports take traffic without an API key (its SDKs send none to
  // them); the traffic token above, when set, still guards them.
  spec.labels[public_ports_label] = "true";
  auto cfg = g.ctx;
  g.self->request(g.front, create_timeout, create_atom::value, std::move(spec))
    .then(
      [c, cfg](sandbox_info& info) {
        answer(c, 201, encode_sandbox(info, access_token(cfg->config, info.id), cfg->config.sandbox_domain));
      },
      on_error(c));
}

/// templateID: an image reference (`127.0.0.1:5000/team/py:3.11`, it has a
/// registry, a tag or a digest: never an alias name nor a layer ref), else an
/// alias of the node's store (`dsec layer alias`, read on the worker pool; it
/// wins over the built-in names), else template_layers.
void create(const gateway_ref& g, const http_call& c) {
  auto req = parse_create(c->body);
  if (!req)
    return reply_error(c, req.err());
  if (registry::looks_like_image_reference(req->template_id)) {
    auto image = req->template_id; // the spec's validation checks it
    return create_from(g, c, std::move(*req), {}, std::move(image));
  }
  if (!g.ctx->store || !g.ctx->pool || !layers::check_alias_name(req->template_id)) {
    auto l = template_layers(req->template_id);
    if (!l)
      return reply_error(c, l.err());
    return create_from(g, c, std::move(*req), std::move(*l));
  }
  run_blocking(g.self, *g.ctx->pool,
               [root = g.ctx->store->root()] { return layers::read_aliases(root); },
               [g, c, req = std::move(*req)](expected<layers::alias_map>& aliases) mutable {
                 if (!aliases)
                   return reply_error(c, aliases.err());
                 if (auto it = aliases->find(req.template_id); it != aliases->end())
                   return create_from(g, c, std::move(req), {it->second});
                 auto l = template_layers(req.template_id);
                 if (!l)
                   return reply_error(c, l.err());
                 create_from(g, c, std::move(req), std::move(*l));
               });
}

void get(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto cfg = g.ctx;
  g.self->request(g.front, call_timeout, info_atom::value, id)
    .then([c, cfg](sandbox_info& info) {
            answer(c, 200, encode_sandbox(info, access_token(cfg->config, info.id), cfg->config.sandbox_domain));
          },
          on_error(c));
}

void list(const gateway_ref& g, const http_call& c,
          const std::map<std::string, std::string>& query, bool running_only) {
  auto q = parse_list_query(query);
  if (!q)
    return reply_error(c, q.err());
  if (running_only && q->states.empty())
    q->states = {"running"};
  g.self->request(g.front, call_timeout, list_atom::value, std::map<std::string, std::string>{})
    .then(
      [c, q = *q](std::vector<sandbox_info>& all) {
        std::string next;
        auto page = select_page(std::move(all), q, next);
        std::vector<std::pair<std::string, std::string>> headers;
        if (!next.empty())
          headers.emplace_back("X-Next-Token", next);
        answer(c, 200, encode_sandbox_list(page), "application/json", std::move(headers));
      },
      on_error(c));
}

void kill(const gateway_ref& g, const http_call& c, const std::string& id) {
  g.self->request(g.front, create_timeout, destroy_atom::value, id)
    .then(
      [c, id](bool existed) {
        if (existed)
          return no_content(c);
        answer(c, 404, error_body(404, "sandbox " + id + " not found"));
      },
      on_error(c));
}

void set_timeout(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto t = parse_timeout(c->body);
  if (!t)
    return reply_error(c, t.err());
  if (*t < 0)
    return reply_error(c, invalid_argument("timeout: an integer number of seconds is required"));
  g.self->request(g.front, call_timeout, setttl_atom::value, id, *t)
    .then([c](sandbox_info&) { no_content(c); }, on_error(c));
}

void pause(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto self = g.self;
  auto front = g.front;
  self->request(front, call_timeout, info_atom::value, id)
    .then(
      [self, front, c, id](sandbox_info& info) {
        if (info.state == sandbox_state::paused)
          return answer(c, 409, error_body(409, "sandbox " + id + " is already paused"));
        self->request(front, create_timeout, pause_atom::value, id)
          .then([c](sandbox_info&) { no_content(c); }, on_error(c));
      },
      on_error(c));
}

/// POST .../connect and .../resume: resumes a paused sandbox (a running one
/// answers at once) and, with a timeout, extends its end to now + timeout
/// when that is later (E2B's connect never shortens a sandbox's life).
void connect(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto t = parse_timeout(c->body);
  if (!t)
    return reply_error(c, t.err());
  auto self = g.self;
  auto front = g.front;
  auto cfg = g.ctx;
  self->request(front, create_timeout, resume_atom::value, id)
    .then(
      [self, front, cfg, c, id, secs = *t](sandbox_info& info) {
        auto done = [c, cfg](sandbox_info& i) {
          answer(c, 200, encode_sandbox(i, access_token(cfg->config, i.id), cfg->config.sandbox_domain));
        };
        bool later = info.expires_at_ms != 0 && now_ms() + secs * 1000 > info.expires_at_ms;
        if (secs < 0 || !later)
          return done(info);
        self->request(front, call_timeout, setttl_atom::value, id, secs).then(done, on_error(c));
      },
      on_error(c));
}

/// A Unix-seconds bound of E2B's metrics query (`start`, `end`), if given.
expected<std::optional<int64_t>> seconds_param(const std::map<std::string, std::string>& q,
                                               const char* name) {
  auto it = q.find(name);
  if (it == q.end())
    return std::optional<int64_t>{};
  auto& v = it->second;
  if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument(std::string{"metrics: "} + name
                            + " must be Unix seconds, got \"" + v.substr(0, 40) + "\"");
  return std::optional<int64_t>{std::stoll(v)};
}

/// GET .../metrics[?start=S&end=E]: one sample of the sandbox's CPU and
/// memory use now, as E2B's SandboxMetric array; empty when now is outside
/// [start, end] (dsec keeps no history of samples).
void metrics(const gateway_ref& g, const http_call& c, const std::string& id,
             const std::map<std::string, std::string>& query) {
  auto start = seconds_param(query, "start");
  auto end = seconds_param(query, "end");
  if (!start || !end)
    return reply_error(c, !start ? start.err() : end.err());
  auto wait = caf::duration{*ops::sbmetrics_op::deadline(ops::waits_of(hop::front))};
  g.self->request(g.front, wait, sbmetrics_atom::value, id)
    .then(
      [c, from = *start, to = *end](sandbox_metric& m) {
        auto at = m.timestamp_ms / 1000;
        if ((from && at < *from) || (to && at > *to))
          return answer(c, 200, "[]");
        answer(c, 200, encode_metrics(m));
      },
      on_error(c));
}

/// GET .../logs: dsec keeps no sandbox logs apart from the trajectory.
void logs(const gateway_ref&, const http_call& c, const std::string&) {
  answer(c, 200, R"({"logs":[]})");
}

// -- the route table ------------------------------------------------------------

/// E2B's API outside /sandboxes (templates, snapshots, volumes, teams, keys):
/// not implemented by dsec, answered 501 in E2B's error shape.
bool is_unimplemented_e2b_route(const std::string& first) {
  static const char* const prefixes[] = {"templates", "v3", "snapshots", "volumes", "teams",
                                         "api-keys", "access-tokens", "nodes", "admin"};
  return std::find(std::begin(prefixes), std::end(prefixes), first) != std::end(prefixes);
}

void not_implemented(const http_call& c) {
  auto path = c->target.substr(0, c->target.find('?')).substr(0, 200);
  answer(c, 501, error_body(501, c->method + " " + path + " is not implemented by dsec"));
}

using query_map = std::map<std::string, std::string>;

/// One control route: a method and a path under /sandboxes, by its depth (0:
/// the collection, 1: one sandbox, 2: one of its actions, named `action`).
struct control_route {
  const char* method;
  size_t depth;
  const char* action;
  void (*serve)(const gateway_ref&, const http_call&, const std::string& id, const query_map&);
};

/// Adapts a handler of one sandbox to the table's signature.
template <void (*F)(const gateway_ref&, const http_call&, const std::string&)>
void on_sandbox(const gateway_ref& g, const http_call& c, const std::string& id,
                const query_map&) {
  F(g, c, id);
}

const control_route control_routes[] = {
  {"POST", 0, "",
   [](const gateway_ref& g, const http_call& c, const std::string&, const query_map&) {
     create(g, c);
   }},
  {"GET", 0, "",
   [](const gateway_ref& g, const http_call& c, const std::string&, const query_map& q) {
     list(g, c, q, false);
   }},
  {"GET", 1, "", on_sandbox<get>},
  {"DELETE", 1, "", on_sandbox<kill>},
  {"GET", 2, "metrics", metrics},
  {"GET", 2, "logs", on_sandbox<logs>},
  {"POST", 2, "timeout", on_sandbox<set_timeout>},
  {"POST", 2, "pause", on_sandbox<pause>},
  {"POST", 2, "connect", on_sandbox<connect>},
  {"POST", 2, "resume", on_sandbox<connect>},
};

} // namespace

std::string access_token(const node_config& cfg, const std::string& id) {
  return cfg.api_keys.empty() ? std::string{} : envd_token(cfg.api_keys.front(), id);
}

void serve_control(const gateway_ref& g, const http_call& c, const std::vector<std::string>& seg,
                   const std::map<std::string, std::string>& query) {
  auto depth = seg.size() - 1; // seg[0] is "sandboxes"
  std::string_view action = depth == 2 ? std::string_view{seg[2]} : std::string_view{};
  const control_route* route = nullptr;
  bool path_known = false;
  for (auto& r : control_routes)
    if (r.depth == depth && action == r.action) {
      path_known = true;
      if (c->method == r.method) {
        route = &r;
        break;
      }
    }
  if (!path_known || (depth == 1 && seg[1] == "metrics"))
    return not_implemented(c);
  if (!route)
    return answer(c, 405, error_body(405, "method " + c->method + " is not allowed here"));
  std::string id;
  if (depth >= 1) {
    auto decoded = url_decode(seg[1]);
    if (!decoded || decoded->empty() || decoded->size() > 256)
      return reply_error(c, invalid_argument("sandbox id: invalid"));
    id = std::move(*decoded);
    // An id no dsec node made is a sandbox that does not exist, as in E2B
    // (so the SDK's kill() answers false).
    if (!valid_sandbox_id(id))
      return answer(c, 404, error_body(404, "sandbox " + id.substr(0, 100) + " not found"));
  }
  route->serve(g, c, id, query);
}

bool dispatch(const gateway_ref& g, const http_call& c) {
  auto qpos = c->target.find('?');
  std::string path = c->target.substr(0, qpos);
  std::map<std::string, std::string> query;
  bool query_ok = qpos == std::string::npos
                  || parse_query(std::string_view{c->target}.substr(qpos + 1), query);
  const auto& cfg = g.ctx->config;
  if (auto id = c->header("e2b-sandbox-id"); !id.empty()) {
    bool rpc = path.find(".Process/") != std::string::npos
               || path.find(".Filesystem/") != std::string::npos;
    if (!cfg.api_keys.empty() && !envd_token_matches(cfg.api_keys, id, c->header("x-access-token"))
        && !api_key_ok(cfg, c)) {
      auto msg = "sandbox " + id + ": a valid X-Access-Token (from create/connect) is required";
      if (rpc)
        answer(c, 401, connect_error("unauthenticated", msg));
      else
        answer(c, 401, error_body(401, msg));
      return true;
    }
    if (!query_ok) {
      answer(c, 400, error_body(400, "query: invalid percent-encoding"));
      return true;
    }
    serve_envd(g, c, id, path, query);
    return true;
  }
  auto parts = split_path(path);
  std::vector<std::string> seg(parts.begin(), parts.end());
  if (!seg.empty() && seg[0] == "v2")
    seg.erase(seg.begin());
  bool e2b_only = !seg.empty() && is_unimplemented_e2b_route(seg[0]);
  if (seg.empty() || (seg[0] != "sandboxes" && !e2b_only))
    return false;
  if (!api_key_ok(cfg, c)) {
    answer(c, 401, error_body(401, "a valid X-API-Key is required"));
    return true;
  }
  if (!query_ok) {
    answer(c, 400, error_body(400, "query: invalid percent-encoding"));
    return true;
  }
  if (e2b_only)
    return not_implemented(c), true;
  serve_control(g, c, seg, query);
  return true;
}

} // namespace dsec::e2b
