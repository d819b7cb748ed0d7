// E2B's snapshots and fork (e2b_gateway.hpp), on dsec's snapshot layers
// (snapshot_op: the sandbox's file changes as a layer, taken while it is
// briefly paused) and branching (a create from those layers):
//
//   POST /sandboxes/{id}/snapshots  snapshot layer + a record in the store
//                                   (api/e2b_snapshots.hpp); 201 SnapshotInfo
//   GET  /snapshots                 the store's records, filtered and paged
//   DELETE /templates/{id}          removes a record (404 if none: the SDK's
//                                   deleteSnapshot answers false)
//   POST /sandboxes/{id}/fork       one snapshot layer, then `count` creates
//                                   from it; 201 with one result per fork
//
// What a fork carries is the source's files, resources, labels (metadata,
// templateID) and lifecycle; not its processes or memory (dsec's snapshot is
// of the filesystem), not its network allow-list nor its create-time envs
// (the node's sandbox_info keeps neither): a fork starts with no network, as
// an E2B create without `network` does on dsec.
#include "actors/e2b_gateway.hpp"

#include <memory>
#include <random>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "api/e2b_codec.hpp"
#include "api/e2b_ports.hpp"
#include "api/e2b_snapshots.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

constexpr auto create_timeout = create_wait(hop::front);
constexpr auto call_timeout = call_wait(hop::front);

uint32_t random_suffix() {
  std::random_device rd; // getrandom(2)
  return static_cast<uint32_t>(rd());
}

/// The store root snapshots are recorded in, or an error naming why none.
expected<std::string> store_root(const gateway_ref& g, const char* what) {
  if (!g.ctx->store || !g.ctx->pool)
    return invalid_argument(std::string{what} + ": this node has no layer store");
  return g.ctx->store->root();
}

/// The spec of one fork of `info`, a sandbox whose snapshot is `snap`.
sandbox_spec fork_spec(const sandbox_info& info, const snapshot_info& snap, int64_t ttl_s) {
  sandbox_spec spec;
  spec.backend = info.backend;
  spec.layers = snap.layers; // the image's layer, if any, is already first
  spec.cpu = info.cpu;
  spec.memory_mb = info.memory_mb;
  spec.disk_mb = info.disk_mb;
  spec.ttl_s = ttl_s;
  spec.labels = info.labels;
  spec.cpu_class = info.cpu_class;
  spec.on_timeout = info.on_timeout;
  spec.auto_resume = info.auto_resume;
  spec.idle_timeout_s = info.idle_timeout_s;
  spec.on_idle = info.on_idle;
  spec.paused_ttl_s = info.paused_ttl_s > 0 ? info.paused_ttl_s : spec.paused_ttl_s;
  return spec;
}

/// The forks of one call as they come back.
struct fork_join {
  std::vector<fork_outcome> results;
  size_t left = 0;
};

void start_forks(const gateway_ref& g, const http_call& c, const sandbox_info& info,
                 const snapshot_info& snap, fork_request req) {
  auto join = std::make_shared<fork_join>();
  join->results.resize(static_cast<size_t>(req.count));
  join->left = join->results.size();
  auto cfg = g.ctx;
  auto finish_one = [c, join] {
    if (--join->left == 0)
      answer(c, 201, encode_fork_results(join->results));
  };
  for (size_t i = 0; i < join->results.size(); ++i) {
    g.self->request(g.front, create_timeout, create_atom::value, fork_spec(info, snap, req.timeout_s))
      .then(
        [join, i, cfg, finish_one](sandbox_info& made) {
          join->results[i].sandbox_json =
            encode_sandbox(made, access_token(cfg->config, made.id), cfg->config.sandbox_domain);
          finish_one();
        },
        [join, i, finish_one](caf::error& err) {
          auto e = from_caf(err);
          join->results[i].status = http_status(e.code);
          join->results[i].message = e.message;
          finish_one();
        });
  }
}

} // namespace

void create_snapshot(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto name = parse_snapshot_request(c->body);
  if (!name)
    return reply_error(c, name.err());
  auto root = store_root(g, "create snapshot");
  if (!root)
    return reply_error(c, root.err());
  auto self = g.self;
  auto pool = g.ctx->pool;
  auto wait = caf::duration{create_timeout};
  self->request(g.front, wait, snapshot_atom::value, id, std::string{}, std::string{})
    .then(
      [self, pool, c, id, root = *root, name = *name](snapshot_info& snap) {
        snapshot_record r;
        r.created_at_ms = now_ms();
        r.id = snapshot_id_of(name, r.created_at_ms, random_suffix());
        if (!name.empty())
          r.names = {name};
        r.sandbox_id = id;
        r.layers = snap.layers;
        run_blocking(self, *pool, [root, r] { return put_snapshot(root, r); },
                     [c, r](status& st) {
                       if (!st)
                         return reply_error(c, st.err());
                       answer(c, 201, encode_snapshot(r));
                     });
      },
      [c](caf::error& err) { reply_error(c, from_caf(err)); });
}

void list_snapshots(const gateway_ref& g, const http_call& c,
                    const std::map<std::string, std::string>& query) {
  auto q = parse_snapshot_query(query);
  if (!q)
    return reply_error(c, q.err());
  if (!g.ctx->store || !g.ctx->pool)
    return answer(c, 200, "[]"); // no store: no snapshot can exist
  run_blocking(g.self, *g.ctx->pool, [root = g.ctx->store->root()] { return read_snapshots(root); },
               [c, q = *q](expected<snapshot_map>& all) {
                 if (!all)
                   return reply_error(c, all.err());
                 std::string next;
                 auto body = encode_snapshot_page(*all, q, next);
                 std::vector<std::pair<std::string, std::string>> headers;
                 if (!next.empty())
                   headers.emplace_back("X-Next-Token", next);
                 answer(c, 200, std::move(body), "application/json", std::move(headers));
               });
}

void delete_snapshot(const gateway_ref& g, const http_call& c, const std::string& snapshot_id) {
  auto not_there = [c, snapshot_id] {
    answer(c, 404, error_body(404, "snapshot " + snapshot_id.substr(0, 100)
                                     + " not found (dsec's E2B templates are snapshots; "
                                       "layers are removed with dsec layer)"));
  };
  if (!g.ctx->store || !g.ctx->pool)
    return not_there();
  run_blocking(g.self, *g.ctx->pool,
               [root = g.ctx->store->root(), snapshot_id] {
                 return remove_snapshot(root, snapshot_id);
               },
               [c, not_there](expected<bool>& removed) {
                 if (!removed)
                   return reply_error(c, removed.err());
                 if (!*removed)
                   return not_there();
                 answer(c, 204, "", "application/json");
               });
}

void fork(const gateway_ref& g, const http_call& c, const std::string& id) {
  auto req = parse_fork(c->body);
  if (!req)
    return reply_error(c, req.err());
  if (!g.ctx->store)
    return reply_error(c, invalid_argument("fork sandbox " + id + ": this node has no layer store"));
  auto self = g.self;
  auto front = g.front;
  auto gref = g;
  self->request(front, call_timeout, info_atom::value, id)
    .then(
      [gref, c, id, req = *req](sandbox_info& info) {
        if (info.state != sandbox_state::running && info.state != sandbox_state::paused)
          return answer(c, 409, error_body(409, "fork sandbox " + id + ": it is "
                                                  + to_string(info.state)));
        gref.self->request(gref.front, caf::duration{create_timeout}, snapshot_atom::value, id,
                           std::string{}, std::string{})
          .then([gref, c, info, req](snapshot_info& snap) { start_forks(gref, c, info, snap, req); },
                [c](caf::error& err) { reply_error(c, from_caf(err)); });
      },
      [c](caf::error& err) { reply_error(c, from_caf(err)); });
}

} // namespace dsec::e2b
