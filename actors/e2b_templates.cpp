// E2B's template build API (e2b_gateway.hpp), on dsec's Dockerfile builder
// (e2b_templates.hpp):
//
//   POST /v3/templates                     a build of template `name` with
//                                          its tags; 202 {templateID, buildID}
//   GET  /templates/{id}/files/{hash}      {present, url}: the upload link of
//                                          a COPY's files (signed with the
//                                          node's key; the SDK sends no header)
//   PUT  /templates/{id}/files/{hash}      the files' tar, kept in the store
//   POST /v2/templates/{id}/builds/{bid}   the steps: refused by name (400)
//                                          or started; 202
//   GET  /templates/{id}/builds/{bid}/status   building | ready | error, logs
//   GET  /templates/aliases/{name}         200 if a template has the name
//   GET  /templates/{id}                   the template and its builds
//   GET  /templates/{id}/tags, POST / DELETE /templates/tags, DELETE
//   /templates/{id}                        tags and templates
//
// Blocking work (the store's record, uploads) runs on the worker pool; a
// build on a thread of its own (e2b_template_build.cpp).
#include "actors/e2b_gateway.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
#include <utility>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "core/inspect.hpp"
#include "actors/e2b_templates.hpp"
#include "api/api_keys.hpp"
#include "api/e2b_codec.hpp"
#include "api/gateway_routes.hpp"
#include "core/clock.hpp"
#include "layers/aliases.hpp"
#include "sys/fs.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

bool has_store(const gateway_ref& g) { return g.ctx->store && g.ctx->pool; }

template_registry& registry(const gateway_ref& g) {
  return template_registry::of(g.ctx->store->root());
}

std::string new_build_id() {
  std::random_device rd;
  char buf[40];
  uint32_t w[4] = {rd(), rd(), rd(), rd()};
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%04x%08x", w[0], w[1] >> 16,
                w[1] & 0xfff, 0x8000 | (w[2] & 0x3fff), w[2] >> 16, w[3]);
  return buf;
}

void not_found_answer(const http_call& c, const std::string& what) {
  answer(c, 404, error_body(404, what + " not found"));
}

/// Runs `then` once the store's record of templates and the node's record
/// of builds are in memory (read on the pool the first time).
template <class F>
void with_templates(const gateway_ref& g, F then) {
  auto& reg = registry(g);
  bool loaded = false;
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    loaded = reg.loaded;
  }
  if (loaded) // `then` takes the lock itself
    return then();
  auto builds_path = builds_record_path(g.ctx->config.state_dir);
  run_blocking(g.self, *g.ctx->pool,
               [root = g.ctx->store->root(), builds_path] {
                 return read_registry_records(root, builds_path);
               },
               [&reg, then, builds_path, node = g.ctx->config.node_id](registry_records& got) mutable {
                 apply_registry_records(reg, got, builds_path, node);
                 then();
               });
}

/// Writes the record as it is in memory now, then answers with `done`.
template <class F>
void save_then(const gateway_ref& g, const http_call& c, F done) {
  auto& reg = registry(g);
  template_map copy;
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    if (!reg.load_error.empty())
      return reply_error(c, error{errc::internal, reg.load_error});
    copy = reg.templates;
  }
  run_blocking(g.self, *g.ctx->pool,
               [root = g.ctx->store->root(), copy = std::move(copy)] {
                 return write_templates(root, copy);
               },
               [c, done](status& st) mutable {
                 if (!st)
                   return reply_error(c, st.err());
                 done();
               });
}

std::string upload_signature(const node_config& cfg, const std::string& id,
                             const std::string& hash) {
  return cfg.api_keys.empty() ? std::string{}
                              : envd_token(cfg.api_keys.front(), "template-upload:" + id + ":" + hash);
}

// -- builds ----------------------------------------------------------------------

void request_build(const gateway_ref& g, const http_call& c) {
  auto req = parse_build_request(c->body);
  if (!req)
    return reply_error(c, req.err());
  if (auto builtin = template_layers(req->name); builtin)
    return reply_error(c, invalid_argument("template name " + req->name
                                           + " is a built-in template of dsec; choose another"));
  with_templates(g, [g, c, req = std::move(*req)] {
    auto& reg = registry(g);
    template_build b;
    b.id = new_build_id();
    b.template_name = req.name;
    b.tags = req.tags;
    b.cpu = req.cpu;
    b.memory_mb = req.memory_mb;
    b.created_at_ms = now_ms();
    b.logs.push_back({b.created_at_ms, "info", "Build requested for " + req.name});
    {
      std::lock_guard<std::mutex> lock{reg.mutex};
      reg.builds[b.id] = b;
    }
    record_builds_later(reg, *g.ctx->pool);
    json out = {{"templateID", req.name}, {"buildID", b.id},   {"public", false},
                {"aliases", {req.name}},  {"names", {req.name}}, {"tags", req.tags}};
    answer(c, 202, out.dump());
  });
}

/// The build `bid` of template `id`, or an answer saying why not (false).
bool find_build(const gateway_ref& g, const http_call& c, const std::string& id,
                const std::string& bid, template_build* out) {
  auto& reg = registry(g);
  std::lock_guard<std::mutex> lock{reg.mutex};
  auto it = reg.builds.find(bid);
  if (it == reg.builds.end() || it->second.template_name != id) {
    not_found_answer(c, "build " + bid.substr(0, 64) + " of template " + id.substr(0, 64));
    return false;
  }
  if (out)
    *out = it->second;
  return true;
}

void trigger_build(const gateway_ref& g, const http_call& c, const std::string& id,
                   const std::string& bid) {
  auto start = parse_build_start(c->body);
  if (!start)
    return reply_error(c, start.err());
  template_build b;
  if (!find_build(g, c, id, bid, &b))
    return;
  if (b.status != "waiting")
    return answer(c, 409, error_body(409, "build " + bid + " was already started"));
  build_job job{bid, g.ctx->store->root(), std::move(*start), g.ctx};
  start_template_build(registry(g), std::move(job));
  answer(c, 202, "");
}

void build_status(const gateway_ref& g, const http_call& c, const std::string& id,
                  const std::string& bid, const std::map<std::string, std::string>& query) {
  size_t offset = 0;
  for (auto& [k, v] : query) {
    if (k != "logsOffset")
      return reply_error(c, invalid_argument("build status: query parameter " + k.substr(0, 64)
                                             + " is not supported by dsec (only logsOffset)"));
    char* end = nullptr;
    auto n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 0)
      return reply_error(c, invalid_argument("build status: logsOffset must be an integer >= 0"));
    offset = static_cast<size_t>(n);
  }
  template_build b;
  if (!find_build(g, c, id, bid, &b))
    return;
  answer(c, 200, encode_build_status(id, bid, b.status, b.logs, offset, b.reason, b.step));
}

// -- uploads -----------------------------------------------------------------------

void upload_link(const gateway_ref& g, const http_call& c, const std::string& id,
                 const std::string& hash) {
  if (!is_files_hash(hash))
    return reply_error(c, invalid_argument("file upload: hash must be a sha256 hex digest"));
  auto host = c->header("host");
  if (host.empty())
    host = g.ctx->config.rest;
  auto url = "http://" + host + "/templates/" + id + "/files/" + hash;
  if (auto sig = upload_signature(g.ctx->config, id, hash); !sig.empty())
    url += "?signature=" + sig;
  run_blocking(g.self, *g.ctx->pool,
               [path = template_files_path(g.ctx->store->root(), hash)] {
                 struct stat st;
                 return ::stat(path.c_str(), &st) == 0;
               },
               [c, url](bool& present) {
                 answer(c, 200, json{{"present", present}, {"url", url}}.dump());
               });
}

void store_upload(const gateway_ref& g, const http_call& c, const std::string& hash) {
  if (!is_files_hash(hash))
    return reply_error(c, invalid_argument("file upload: hash must be a sha256 hex digest"));
  auto root = g.ctx->store->root();
  run_blocking(g.self, *g.ctx->pool,
               [root, hash, body = c->body]() -> status {
                 if (auto st = sys::make_dirs(root + "/e2b_template_files"); !st)
                   return st;
                 return sys::write_file_atomic(template_files_path(root, hash), body, 0600,
                                               sys::durability::process_crash);
               },
               [c](status& st) {
                 if (!st)
                   return reply_error(c, st.err());
                 answer(c, 200, "{}");
               });
}

// -- names and tags ----------------------------------------------------------------

void alias_exists(const gateway_ref& g, const http_call& c, const std::string& alias) {
  with_templates(g, [g, c, alias] {
    bool built = false;
    {
      auto& reg = registry(g);
      std::lock_guard<std::mutex> lock{reg.mutex};
      built = reg.templates.count(alias) > 0;
    }
    if (built || (alias.find('@') == std::string::npos && template_layers(alias)))
      return answer(c, 200, json{{"templateID", alias}, {"public", false}}.dump());
    run_blocking(g.self, *g.ctx->pool,
                 [root = g.ctx->store->root()] { return layers::read_aliases(root); },
                 [c, alias](expected<layers::alias_map>& a) {
                   if (!a)
                     return reply_error(c, a.err());
                   if (a->count(alias))
                     return answer(c, 200, json{{"templateID", alias}, {"public", false}}.dump());
                   not_found_answer(c, "template " + alias.substr(0, 100));
                 });
  });
}

void list_tags(const gateway_ref& g, const http_call& c, const std::string& id) {
  with_templates(g, [g, c, id] {
    auto& reg = registry(g);
    std::lock_guard<std::mutex> lock{reg.mutex};
    auto t = reg.templates.find(id);
    if (t == reg.templates.end())
      return not_found_answer(c, "template " + id.substr(0, 100));
    auto out = json::array();
    for (auto& [tag, v] : t->second)
      out.push_back({{"tag", tag}, {"buildID", v.build_id}, {"createdAt", rfc3339(v.created_at_ms)}});
    answer(c, 200, out.dump());
  });
}

/// GET /templates/{id}: E2B's TemplateWithBuilds, from the records (so it
/// answers after a restart). dsec does not count spawns: spawnCount is 0 and
/// lastSpawnedAt null.
void template_info(const gateway_ref& g, const http_call& c, const std::string& id) {
  with_templates(g, [g, c, id] {
    auto& reg = registry(g);
    std::lock_guard<std::mutex> lock{reg.mutex};
    auto builds = json::array();
    int64_t created = 0, updated = 0;
    auto seen = [&](int64_t at) {
      if (at > 0 && (created == 0 || at < created))
        created = at;
      updated = std::max(updated, at);
    };
    for (auto& [bid, b] : reg.builds) {
      if (b.template_name != id)
        continue;
      int64_t last = b.logs.empty() ? b.created_at_ms : b.logs.back().at_ms;
      seen(b.created_at_ms);
      seen(last);
      json one = {{"buildID", bid},     {"status", b.status},         {"cpuCount", b.cpu},
                  {"memoryMB", b.memory_mb}, {"createdAt", rfc3339(b.created_at_ms)},
                  {"updatedAt", rfc3339(last)}};
      if (b.status == "ready" || b.status == "error")
        one["finishedAt"] = rfc3339(last);
      builds.push_back(std::move(one));
    }
    auto t = reg.templates.find(id);
    if (t != reg.templates.end())
      for (auto& [tag, v] : t->second)
        seen(v.created_at_ms);
    if (builds.empty() && t == reg.templates.end())
      return not_found_answer(c, "template " + id.substr(0, 100));
    json out = {{"templateID", id},     {"public", false},           {"aliases", {id}},
                {"names", {id}},        {"createdAt", rfc3339(created)},
                {"updatedAt", rfc3339(updated)}, {"lastSpawnedAt", nullptr},
                {"spawnCount", 0},      {"builds", builds}};
    answer(c, 200, out.dump());
  });
}

/// The JSON object body of a tag call, or an error answer (discarded).
json object_body(const http_call& c, const char* what) {
  auto j = json::parse(c->body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    reply_error(c, invalid_argument(std::string{what} + ": the body is not a JSON object"));
  return j;
}

expected<std::vector<std::string>> tag_list(const json& j, const char* what) {
  auto t = j.find("tags");
  if (t == j.end() || !t->is_array() || t->empty())
    return invalid_argument(std::string{what} + ": tags (a non-empty list) is required");
  std::vector<std::string> out;
  for (auto& v : *t) {
    if (!v.is_string())
      return invalid_argument(std::string{what} + ": tags must be strings");
    if (auto st = check_tag(v.get<std::string>()); !st)
      return error{st.err().code, std::string{what} + ": " + st.err().message};
    out.push_back(v.get<std::string>());
  }
  return out;
}

void assign_tags(const gateway_ref& g, const http_call& c) {
  auto j = object_body(c, "assign tags");
  if (j.is_discarded() || !j.is_object())
    return;
  for (auto& [k, v] : j.items())
    if (k != "target" && k != "tags")
      return reply_error(c, invalid_argument("assign tags: field " + k.substr(0, 64)
                                             + " is not supported by dsec"));
  auto target = parse_template_name(j.value("target", ""), "assign tags: target");
  if (!target)
    return reply_error(c, target.err());
  auto tags = tag_list(j, "assign tags");
  if (!tags)
    return reply_error(c, tags.err());
  with_templates(g, [g, c, target = *target, tags = *tags] {
    auto& reg = registry(g);
    std::string build_id;
    {
      std::lock_guard<std::mutex> lock{reg.mutex};
      auto t = reg.templates.find(target.name);
      auto from = target.tag.empty() ? std::string{default_tag} : target.tag;
      if (t == reg.templates.end() || !t->second.count(from))
        return not_found_answer(c, "template " + target.name + ":" + from);
      auto entry = t->second[from];
      entry.created_at_ms = now_ms();
      for (auto& tag : tags)
        t->second[tag] = entry;
      build_id = entry.build_id;
    }
    save_then(g, c, [c, build_id, tags] {
      answer(c, 201, json{{"buildID", build_id}, {"tags", tags}}.dump());
    });
  });
}

void remove_tags(const gateway_ref& g, const http_call& c) {
  auto j = object_body(c, "remove tags");
  if (j.is_discarded() || !j.is_object())
    return;
  for (auto& [k, v] : j.items())
    if (k != "name" && k != "tags")
      return reply_error(c, invalid_argument("remove tags: field " + k.substr(0, 64)
                                             + " is not supported by dsec"));
  auto name = parse_template_name(j.value("name", ""), "remove tags: name");
  if (!name)
    return reply_error(c, name.err());
  auto tags = tag_list(j, "remove tags");
  if (!tags)
    return reply_error(c, tags.err());
  with_templates(g, [g, c, name = name->name, tags = *tags] {
    auto& reg = registry(g);
    {
      std::lock_guard<std::mutex> lock{reg.mutex};
      auto t = reg.templates.find(name);
      if (t == reg.templates.end())
        return not_found_answer(c, "template " + name);
      for (auto& tag : tags)
        if (!t->second.count(tag))
          return not_found_answer(c, "tag " + tag + " of template " + name);
      for (auto& tag : tags)
        t->second.erase(tag);
      if (t->second.empty())
        reg.templates.erase(t);
    }
    save_then(g, c, [c] { answer(c, 204, ""); });
  });
}

} // namespace

bool serve_templates(const gateway_ref& g, const http_call& c, const std::vector<std::string>& seg,
                     const std::map<std::string, std::string>& query) {
  auto n = seg.size();
  bool v3 = n == 2 && seg[0] == "v3" && seg[1] == "templates";
  if (!v3 && (n < 2 || seg[0] != "templates"))
    return false;
  auto& m = c->method;
  // GET /templates/{id}, not the /v2 form (E2B has no such GET).
  bool info = n == 2 && m == "GET" && c->target.rfind("/v2/", 0) != 0;
  bool ours = v3 || (n == 2 && (seg[1] == "tags" || info))
              || (n == 3 && (seg[1] == "aliases" || seg[2] == "tags"))
              || (n == 4 && (seg[2] == "files" || seg[2] == "builds"))
              || (n == 5 && seg[2] == "builds" && seg[4] == "status");
  if (!ours)
    return false;
  if (!has_store(g)) {
    answer(c, 501, error_body(501, "template builds: this node has no layer store"));
    return true;
  }
  std::vector<std::string> dec;
  for (auto& s : seg) {
    auto d = url_decode(s);
    if (!d || d->empty() || d->size() > 256) {
      reply_error(c, invalid_argument("template route: invalid path segment"));
      return true;
    }
    dec.push_back(std::move(*d));
  }
  auto bad_method = [&] {
    answer(c, 405, error_body(405, "method " + m + " is not allowed here"));
  };
  if (v3)
    return m == "POST" ? request_build(g, c) : bad_method(), true;
  if (info && dec[1] != "tags")
    return template_info(g, c, dec[1]), true;
  if (n == 2)
    return m == "POST" ? assign_tags(g, c) : m == "DELETE" ? remove_tags(g, c) : bad_method(), true;
  if (n == 3 && dec[1] == "aliases")
    return m == "GET" ? alias_exists(g, c, dec[2]) : bad_method(), true;
  if (n == 3)
    return m == "GET" ? list_tags(g, c, dec[1]) : bad_method(), true;
  if (n == 4 && dec[2] == "files") {
    if (m == "GET")
      return with_templates(g, [g, c, id = dec[1], h = dec[3]] { upload_link(g, c, id, h); }), true;
    return m == "PUT" ? store_upload(g, c, dec[3]) : bad_method(), true;
  }
  // Builds are read back from the node's record first (after a restart).
  if (n == 4)
    return m == "POST" ? with_templates(g, [g, c, id = dec[1], bid = dec[3]] {
             trigger_build(g, c, id, bid);
           })
                       : bad_method(),
           true;
  return m == "GET" ? with_templates(g, [g, c, id = dec[1], bid = dec[3], query] {
           build_status(g, c, id, bid, query);
         })
                    : bad_method(),
         true;
}

bool serve_template_upload(const gateway_ref& g, const http_call& c,
                           const std::vector<std::string>& seg,
                           const std::map<std::string, std::string>& query) {
  if (c->method != "PUT" || seg.size() != 4 || seg[0] != "templates" || seg[2] != "files"
      || !query.count("signature") || !has_store(g))
    return false;
  auto sig = upload_signature(g.ctx->config, seg[1], seg[3]);
  if (sig.empty() || !key_matches({sig}, query.at("signature"))) {
    answer(c, 401, error_body(401, "template file upload: the signature does not match"));
    return true;
  }
  store_upload(g, c, seg[3]);
  return true;
}

bool templates_loaded(const gateway_ref& g) {
  if (!has_store(g))
    return true;
  auto& reg = registry(g);
  std::lock_guard<std::mutex> lock{reg.mutex};
  return reg.loaded;
}

void load_templates(const gateway_ref& g, std::function<void()> then) {
  with_templates(g, std::move(then));
}

/// After a restart that cut builds short: their step sandboxes on this node
/// (label dsec-build, made by the builder over REST) outlived them; destroy
/// them rather than leave them to their 6 h TTL.
void reap_interrupted_steps(const gateway_ref& g) {
  bool any = false;
  {
    auto& reg = registry(g);
    std::lock_guard<std::mutex> lock{reg.mutex};
    for (auto& [id, b] : reg.builds)
      any = any || std::exchange(b.interrupted_at_load, false);
  }
  if (!any)
    return;
  record_builds_later(registry(g), *g.ctx->pool); // cleared: reaped once
  auto self = g.self;
  auto front = g.front;
  auto node = g.ctx->config.node_id;
  self->request(front, call_wait(hop::front), list_atom::value, label_map{{"dsec-build", "1"}})
    .then(
      [self, front, node](std::vector<sandbox_info>& all) {
        size_t n = 0;
        for (auto& sb : all)
          if (sb.node == node) {
            ++n;
            self->request(front, call_wait(hop::front), destroy_atom::value, sb.id)
              .then([](bool) {}, [](caf::error&) {});
          }
        std::cerr << "dsec node " << node << ": e2b template builds: destroying " << n
                  << " step sandboxes of builds the last stop cut short" << std::endl;
      },
      [node](caf::error& e) {
        std::cerr << "dsec node " << node << ": e2b template builds: list step sandboxes: "
                  << from_caf(e).message << std::endl;
      });
}

void preload_templates(const gateway_ref& g) {
  if (has_store(g))
    with_templates(g, [g] { reap_interrupted_steps(g); });
}

std::optional<built_template_target> built_template(const gateway_ref& g, const std::string& id) {
  if (!has_store(g))
    return std::nullopt;
  auto tn = parse_template_name(id, "templateID");
  if (!tn)
    return std::nullopt;
  auto& reg = registry(g);
  std::lock_guard<std::mutex> lock{reg.mutex};
  auto t = reg.templates.find(tn->name);
  if (t == reg.templates.end())
    return std::nullopt;
  auto tag = t->second.find(tn->tag.empty() ? default_tag : tn->tag);
  if (tag == t->second.end())
    return std::nullopt;
  return built_template_target{{tag->second.layer}, tag->second.cpu, tag->second.memory_mb,
                               tag->second.start_cmd, tag->second.ready_cmd};
}

bool delete_built_template(const gateway_ref& g, const http_call& c, const std::string& id) {
  if (!has_store(g))
    return false;
  auto& reg = registry(g);
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    if (!reg.templates.erase(id))
      return false;
  }
  save_then(g, c, [c] { answer(c, 204, ""); });
  return true;
}

} // namespace dsec::e2b
