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
#include "api/e2b_snapshots.hpp"
#include "api/e2b_default_templates.hpp"
#include "core/port_route.hpp"
#include "api/gateway_routes.hpp"
#include "actors/operations.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/image_reference.hpp"
#include "core/inspect.hpp"
#include "layers/aliases.hpp"
#include "api/e2b_host_mask.hpp"
#include "core/host_mask.hpp"

namespace dsec::e2b {

namespace {

using namespace std::chrono_literals;

/// A create waits for layers to mount and init to start; a stuck backend
/// answers 504 after this. Front-hop bounds (core/clock.hpp): longer than
/// placement's waits on a peer, so a slow peer yields placement's error.
constexpr auto create_timeout = create_wait(hop::front);
constexpr auto call_timeout = call_wait(hop::front);

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
                 std::vector<std::string> layers, std::string image = {},
                 template_start start = {}) {
  sandbox_spec spec;
  spec.layers = std::move(layers);
  spec.image = std::move(image);
  spec.ttl_s = req.timeout_s;
  spec.labels = std::move(req.metadata);
  spec.labels[template_label] = req.template_id;
  spec.env = std::move(req.env);
  // A built template's size (POST /v3/templates cpuCount, memoryMB).
  if (req.template_cpu > 0)
    spec.cpu = req.template_cpu;
  if (req.template_memory_mb > 0)
    spec.memory_mb = req.template_memory_mb;
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
  // network.maskRequestHost: the Host its ports see (api/e2b_host_mask.hpp).
  auto mask = host_mask_of_create(c->body);
  if (!mask)
    return reply_error(c, mask.err());
  if (!mask->empty())
    spec.labels[host_mask_label] = std::move(*mask);
  // E2B's ports take traffic without an API key (its SDKs send none to
  // them); the traffic token above, when set, still guards them.
  spec.labels[public_ports_label] = "true";
  auto cfg = g.ctx;
  g.self->request(g.front, create_timeout, create_atom::value, std::move(spec))
    .then(
      [g, c, cfg, start](sandbox_info& info) {
        watch_metrics(g, info); // E2B's metrics cover the sandbox's life
        // A built template's start and ready commands first (e2b_start_cmd.cpp).
        start_template_commands(g, c, info, start, [c, cfg](sandbox_info& i) {
          answer(c, 201, encode_sandbox(i, access_token(cfg->config, i.id), cfg->config.sandbox_domain));
        });
      },
      // A built-in template's missing layer names the command that builds it.
      [c, tpl = req.template_id](caf::error& err) {
        reply_error(c, with_default_layers_hint(from_caf(err), tpl));
      });
}

using layer_list = std::vector<std::string>;

/// Blocking: the layers a store name gives templateID `id`: an alias of the
/// store (its one layer), else an E2B snapshot (its whole stack,
/// api/e2b_snapshots.hpp); nullopt if neither.
expected<std::optional<layer_list>> named_layers(const std::string& root, const std::string& id) {
  auto aliases = layers::read_aliases(root);
  if (!aliases)
    return aliases.err();
  if (auto it = aliases->find(id); it != aliases->end())
    return std::optional<layer_list>{layer_list{it->second}};
  auto snaps = read_snapshots(root);
  if (!snaps)
    return snaps.err();
  if (auto it = snaps->find(id); it != snaps->end())
    return std::optional<layer_list>{it->second.layers};
  return std::optional<layer_list>{};
}

/// templateID: an image reference (`127.0.0.1:5000/team/py:3.11`, it has a
/// registry, a tag or a digest: never an alias name nor a layer ref), else an
/// alias of the node's store (`dsec layer alias`, read on the worker pool; it
/// wins over the built-in names), else an E2B snapshot id, else template_layers.
void create(const gateway_ref& g, const http_call& c) {
  auto req = parse_create(c->body);
  if (!req)
    return reply_error(c, req.err());
  // A template built through E2B's template API (e2b_templates.cpp), `name`
  // or `name:tag`, once the node has its store's record in memory.
  if (!templates_loaded(g))
    return load_templates(g, [g, c] { create(g, c); });
  if (auto t = built_template(g, req->template_id)) {
    req->template_cpu = t->cpu;
    req->template_memory_mb = t->memory_mb;
    template_start start{req->template_id, t->start_cmd, t->ready_cmd};
    return create_from(g, c, std::move(*req), std::move(t->layers), {}, std::move(start));
  }
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
  // Copied before the call: its arguments' order of evaluation is unspecified
  // and the continuation below moves *req.
  auto template_id = req->template_id;
  run_blocking(g.self, *g.ctx->pool,
               [root = g.ctx->store->root(), id = std::move(template_id)] {
                 return named_layers(root, id);
               },
               [g, c, req = std::move(*req)](expected<std::optional<layer_list>>& named) mutable {
                 if (!named)
                   return reply_error(c, named.err());
                 if (*named)
                   return create_from(g, c, std::move(req), std::move(**named));
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

/// POST .../pause {"memory": bool}: `memory` false (the SDK's keepMemory
/// false) keeps only the files; the connect that resumes boots it again.
void pause(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto keep = parse_pause(c->body);
  if (!keep)
    return reply_error(c, keep.err());
  auto self = g.self;
  auto front = g.front;
  self->request(front, call_timeout, info_atom::value, id)
    .then(
      [self, front, c, id, keep = *keep](sandbox_info& info) {
        if (info.state == sandbox_state::paused)
          return answer(c, 409, error_body(409, "sandbox " + id + " is already paused"));
        auto req = keep ? self->request(front, create_timeout, pause_atom::value, id)
                        : self->request(front, create_timeout, pausefiles_atom::value, id);
        req.then([c](sandbox_info&) { no_content(c); }, on_error(c));
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

/// PUT .../network (E2B's updateNetwork): the sandbox's allow-list replaced
/// by the body's (api/e2b_create.hpp), 204.
void update_network(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto policy = parse_network_update(c->body, id);
  if (!policy)
    return reply_error(c, policy.err());
  g.self->request(g.front, call_timeout, network_atom::value, id, std::move(*policy))
    .then([c](bool) { no_content(c); }, on_error(c));
}

/// GET .../logs: dsec keeps no sandbox logs apart from the trajectory.
void logs(const gateway_ref&, const http_call& c, const std::string&) {
  answer(c, 200, R"({"logs":[]})");
}

// -- the route table ------------------------------------------------------------

/// E2B's API outside /sandboxes (templates, snapshots, volumes, teams, keys):
/// E2B's own, answered in its error shape (serve_outside_sandboxes: dsec's
/// snapshots, else 501).
bool is_unimplemented_e2b_route(const std::string& first) {
  static const char* const prefixes[] = {"templates", "v3", "snapshots", "volumes", "teams",
                                         "api-keys", "access-tokens", "nodes", "admin"};
  return std::find(std::begin(prefixes), std::end(prefixes), first) != std::end(prefixes);
}

void not_implemented(const http_call& c) {
  auto path = c->target.substr(0, c->target.find('?')).substr(0, 200);
  answer(c, 501, error_body(501, c->method + " " + path + " is not implemented by dsec"));
}

/// E2B's routes outside /sandboxes that dsec serves: its snapshots (GET
/// /snapshots, DELETE /templates/{snapshot id}); the rest answer 501.
void serve_outside_sandboxes(const gateway_ref& g, const http_call& c,
                             const std::vector<std::string>& seg,
                             const std::map<std::string, std::string>& query) {
  if (serve_templates(g, c, seg, query))
    return;
  if (seg.size() == 1 && seg[0] == "snapshots" && c->method == "GET")
    return list_snapshots(g, c, query);
  if (seg.size() == 2 && seg[0] == "templates" && c->method == "DELETE") {
    auto id = url_decode(seg[1]);
    if (!id || id->empty() || id->size() > 256)
      return reply_error(c, invalid_argument("delete template: invalid id"));
    if (!templates_loaded(g))
      return load_templates(g, [g, c, seg, query] { serve_outside_sandboxes(g, c, seg, query); });
    if (delete_built_template(g, c, *id))
      return;
    return delete_snapshot(g, c, *id);
  }
  not_implemented(c);
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
  {"POST", 2, "snapshots", on_sandbox<create_snapshot>},
  {"POST", 2, "fork", on_sandbox<fork>},
  {"PUT", 2, "network", on_sandbox<update_network>},
};

} // namespace

void reply_error(const http_call& c, const error& err) {
  int status = http_status(err.code);
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 429)
    headers.emplace_back("Retry-After", "1");
  answer(c, status, error_body(status, err.message), "application/json", std::move(headers));
}

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
  if (depth == 1 && seg[1] == "metrics")
    return c->method == "GET" ? metrics_of_many(g, c, query)
                              : answer(c, 405, error_body(405, "GET /sandboxes/metrics only"));
  if (!path_known)
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
  // A signed URL (a secure sandbox's downloadUrl/uploadUrl) carries its
  // authority in the query, and comes with no header at all.
  if (path == "/files" && query_ok && query.count("signature")) {
    serve_signed_files(g, c, path, query);
    return true;
  }
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
  // A template file upload carries its authority in its signed URL.
  if (e2b_only && query_ok && serve_template_upload(g, c, seg, query))
    return true;
  if (!api_key_ok(cfg, c)) {
    answer(c, 401, error_body(401, "a valid X-API-Key is required"));
    return true;
  }
  if (!query_ok) {
    answer(c, 400, error_body(400, "query: invalid percent-encoding"));
    return true;
  }
  if (e2b_only)
    return serve_outside_sandboxes(g, c, seg, query), true;
  serve_control(g, c, seg, query);
  return true;
}

} // namespace dsec::e2b
