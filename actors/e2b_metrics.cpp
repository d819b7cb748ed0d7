// E2B's metrics over time (e2b_gateway.hpp): a sampler per sandbox, spawned
// by the gateway when an E2B create answers (or at the first metrics call of
// any other sandbox), takes one sample every sample_interval (the sandbox's
// own, sbmetrics_op: CPU since the previous sample and memory; then the disk
// its directory takes on this node, on the worker pool) and keeps the last
// max_samples in the node's history (api/e2b_metrics.hpp). It ends,
// forgetting the history, when the sandbox is gone (not found, or 3 failed
// samples in a row) or the gateway stops.
//
//   GET /sandboxes/{id}/metrics[?start=S&end=E]  the history within
//       [start, end] (Unix seconds) plus a fresh sample when now is inside
//   GET /sandboxes/metrics?sandbox_ids=a,b      the newest sample of each
#include "actors/e2b_gateway.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/operations.hpp"
#include "api/e2b_codec.hpp"
#include "api/e2b_metrics.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

/// The node's history (one per process: sandbox ids are unique across
/// nodes, so nodes in one process share it safely).
metrics_history& history() {
  static metrics_history h;
  return h;
}

/// Failed samples in a row after which a sampler takes its sandbox for gone.
constexpr int max_failures = 3;

caf::duration sample_wait() {
  return caf::duration{*ops::sbmetrics_op::deadline(ops::waits_of(hop::front))};
}

/// One sample of sandbox `id`: its own (sbmetrics_op), then the disk its
/// directory takes, read on the worker pool; added to the history and given
/// to `done`, or the error to `fail`.
template <class Self, class Done, class Fail>
void take_sample(Self* self, const placement_actor& front, const node_context_ptr& ctx,
                 const std::string& id, int64_t disk_total, Done done, Fail fail) {
  self->request(front, sample_wait(), sbmetrics_atom::value, id)
    .then(
      [self, ctx, id, disk_total, done](sandbox_metric& m) {
        auto finish = [id, disk_total, done, m](int64_t used) {
          metric_sample s{m, used, disk_total};
          history().add(id, s);
          done(s);
        };
        if (!ctx->pool)
          return finish(0);
        run_blocking(self, *ctx->pool, [dir = ctx->sandbox_dir(id)] { return disk_bytes(dir); },
                     [finish](int64_t& used) { finish(used); });
      },
      [fail](caf::error& err) { fail(err); });
}

caf::behavior metrics_sampler(caf::event_based_actor* self, placement_actor front,
                              node_context_ptr ctx, caf::actor gateway, std::string id,
                              int64_t disk_total) {
  auto failures = std::make_shared<int>(0);
  // The gateway's end is the sampler's: no tick outlives the node.
  self->monitor(gateway);
  self->set_down_handler([self, id](caf::down_msg&) {
    history().forget(id);
    self->quit();
  });
  self->send(self, caf::tick_atom::value);
  return {
    // INTERNAL: the disk walk's result (run_blocking).
    [](cont_atom, continuation& k) { k.fn(); },
    // INTERNAL: one sample, then the next tick.
    [self, front, ctx, id, disk_total, failures](caf::tick_atom) {
      take_sample(
        self, front, ctx, id, disk_total,
        [self, failures](const metric_sample&) {
          *failures = 0;
          self->delayed_send(self, sample_interval, caf::tick_atom::value);
        },
        [self, id, failures](caf::error& err) {
          if (from_caf(err).code == errc::not_found || ++*failures >= max_failures) {
            history().forget(id);
            return self->quit();
          }
          self->delayed_send(self, sample_interval, caf::tick_atom::value);
        });
    },
  };
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

} // namespace

void watch_metrics(const gateway_ref& g, const sandbox_info& info) {
  if (!history().claim(info.id))
    return;
  g.self->spawn(metrics_sampler, g.front, g.ctx, caf::actor_cast<caf::actor>(g.self), info.id,
                info.disk_mb << 20);
}

void metrics(const gateway_ref& g, const http_call& c, const std::string& id,
             const std::map<std::string, std::string>& query) {
  for (auto& [k, v] : query)
    if (k != "start" && k != "end")
      return reply_error(c, invalid_argument("metrics of sandbox " + id + ": query parameter "
                                             + k.substr(0, 64) + " is not implemented by dsec "
                                             "(it takes start and end)"));
  auto start = seconds_param(query, "start");
  auto end = seconds_param(query, "end");
  if (!start || !end)
    return reply_error(c, !start ? start.err() : end.err());
  // Seconds to ms; `end` covers its whole second.
  std::optional<int64_t> from = *start ? std::optional<int64_t>{**start * 1000} : std::nullopt;
  std::optional<int64_t> to = *end ? std::optional<int64_t>{**end * 1000 + 999} : std::nullopt;
  auto gref = g;
  g.self->request(g.front, call_wait(hop::front), info_atom::value, id)
    .then(
      [gref, c, id, from, to](sandbox_info& info) {
        watch_metrics(gref, info);
        take_sample(
          gref.self, gref.front, gref.ctx, id, info.disk_mb << 20,
          [c, id, from, to](const metric_sample&) {
            answer(c, 200, encode_metric_list(history().range(id, from, to)));
          },
          [c](caf::error& err) { reply_error(c, from_caf(err)); });
      },
      [c](caf::error& err) { reply_error(c, from_caf(err)); });
}

void metrics_of_many(const gateway_ref& g, const http_call& c,
                     const std::map<std::string, std::string>& query) {
  auto ids = parse_metric_ids(query);
  if (!ids)
    return reply_error(c, ids.err());
  struct join {
    std::map<std::string, metric_sample> found;
    size_t left = 0;
  };
  auto j = std::make_shared<join>();
  j->left = ids->size();
  auto done = [c, j] {
    if (--j->left == 0)
      answer(c, 200, encode_metric_map(j->found));
  };
  // A sandbox that is gone, or not dsec-shaped, is left out, as E2B lists
  // only running sandboxes.
  auto gref = g;
  for (auto& id : *ids) {
    if (!valid_sandbox_id(id)) {
      done();
      continue;
    }
    if (auto m = history().latest(id)) {
      j->found[id] = *m;
      done();
      continue;
    }
    g.self->request(g.front, call_wait(hop::front), info_atom::value, id)
      .then(
        [gref, j, id, done](sandbox_info& info) {
          take_sample(
            gref.self, gref.front, gref.ctx, id, info.disk_mb << 20,
            [j, id, done](const metric_sample& s) {
              j->found[id] = s;
              done();
            },
            [done](caf::error&) { done(); });
        },
        [done](caf::error&) { done(); });
  }
}

} // namespace dsec::e2b
