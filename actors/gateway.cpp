// Gateway actor: REST route dispatch (DESIGN.md §4).
#include "actors/gateway.hpp"

#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "api/api_keys.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/e2b_gateway.hpp"
#include "actors/gateway_procs.hpp"
#include "actors/gateway_pty.hpp" // terminals (issue 26 part 1)
#include "actors/gateway_session.hpp" // shell sessions (issue 26 part 2)
#include "actors/gateway_ports.hpp"
#include "api/gateway_routes.hpp"
#include "actors/gateway_trajectory.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/sandbox_path.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "core/job.hpp"
#include "core/json_codec.hpp"
#include "lazyfs/stats.hpp"
#include "core/output_budget.hpp"
#include "core/port_scan.hpp"
#include "backends/net/dns_resolver.hpp"
#include "backends/net/name_proxy.hpp"

namespace dsec {

namespace {

namespace codec = json_codec;

// Every wait below is a front-hop bound from core/clock.hpp: longer than
// placement's own wait on a peer, so a slow peer answers with placement's
// error (naming the node), never with this caller's bare timeout.
constexpr hop front_hop = hop::front;

void reply(const http_call& c, int status, std::string body,
           std::string content_type = "application/json") {
  http_answer a;
  a.status = status;
  a.body = std::move(body);
  a.content_type = std::move(content_type);
  c->respond(std::move(a));
}

/// The one place where an error becomes an HTTP answer.
void reply_error(const http_call& c, const error& err, int status_override = 0) {
  http_answer a;
  a.status = status_override ? status_override : http_status_of(err.code);
  a.body = codec::encode(err);
  if (err.code == errc::resource_exhausted)
    a.headers.emplace_back("Retry-After", "1");
  // Unavailable is retryable too: an unreachable owner (issue 28).
  if (err.code == errc::unavailable)
    a.headers.emplace_back("Retry-After", "1");
  c->respond(std::move(a));
}

auto on_error(http_call c) {
  return [c](caf::error& err) { reply_error(c, from_caf(err)); };
}

std::string metrics_text(const node_status& s, const gateway_state& g) {
  std::string out;
  auto add = [&](const char* name, const char* type, const char* help, int64_t v) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string{name} + "{node=\"" + s.node_id + "\"} " + std::to_string(v) + "\n";
  };
  add("dsec_sandboxes", "gauge", "Sandboxes on this node (all states).", s.sandboxes);
  add("dsec_sandboxes_creating", "gauge", "Sandboxes being created.", s.creating);
  add("dsec_creates_total", "counter", "Sandboxes created successfully.", s.creates_total);
  add("dsec_create_failures_total", "counter", "Creates that failed.", s.create_failures_total);
  add("dsec_destroys_total", "counter", "Sandboxes destroyed.", s.destroys_total);
  add("dsec_execs_total", "counter", "Exec requests started.", s.execs_total);
  add("dsec_http_requests_total", "counter", "REST requests received.", g.requests_total);
  add("dsec_http_errors_total", "counter", "REST requests answered with an error.",
      g.errors_total);
  add("dsec_uptime_seconds", "gauge", "Seconds since the node started.", s.uptime_ms / 1000);
  // Measured memory (the reclaim actor's last pass, actors/reclaim.hpp).
  add("dsec_node_resident_bytes", "gauge", "Bytes in RAM held by this node's sandboxes.",
      s.resident_bytes);
  add("dsec_node_swap_bytes", "gauge", "Bytes of this node's sandboxes in compressed swap.",
      s.swap_bytes);
  add("dsec_node_reclaimed_bytes_total", "counter",
      "Bytes reclaim pushed out of RAM from idle sandboxes.", s.reclaimed_bytes_total);
  add("dsec_node_idle_sandboxes", "gauge", "Sandboxes idle past the reclaim threshold.",
      s.idle_sandboxes);
  if (s.memory_available_mb >= 0) {
    add("dsec_node_memory_available_bytes", "gauge", "The host's MemAvailable at the last sample.",
        s.memory_available_mb << 20);
    add("dsec_node_memory_free_bytes", "gauge",
        "Memory admission still gives new sandboxes (after headroom).", s.memory_free_mb << 20);
  }
  if (g.ctx && g.ctx->zram) // a few sysfs reads
    out += g.ctx->zram->metrics_text(s.node_id);
  if (g.ctx && g.ctx->swap_tier)
    out += g.ctx->swap_tier->metrics_text(s.node_id);
  // The lazy blob daemon's counters (one small file it rewrites each second).
  if (g.ctx && !g.ctx->lazy_stats_path.empty())
    if (auto lazy = lazyfs::read_stats(g.ctx->lazy_stats_path); lazy)
      out += lazyfs::metrics_text(*lazy, s.node_id);
  // Kept command output and port scans (issue 29 part 4).
  out += output_budget::node().metrics_text(s.node_id);
  add("dsec_port_scans_total", "counter",
      "Sandboxes whose denied network attempts were reported as a port scan.",
      static_cast<int64_t>(port_scans_total().load()));
  // The sandbox resolver and the SNI/Host check (issue 29 parts 2 and 3).
  const auto& dns = net::dns_resolver::node_stats();
  add("dsec_dns_forwarded_total", "counter",
      "Sandbox DNS queries for allowed names the node's resolver relayed upstream.",
      static_cast<int64_t>(dns.forwarded.load()));
  add("dsec_dns_refused_total", "counter",
      "Sandbox DNS queries answered REFUSED (names the sandbox's rules do not allow).",
      static_cast<int64_t>(dns.refused.load()));
  add("dsec_dns_dropped_total", "counter",
      "Sandbox DNS packets dropped: malformed, oversized or from an unknown address.",
      static_cast<int64_t>(dns.dropped.load()));
  const auto& names = net::name_proxy::node_stats();
  add("dsec_name_check_passed_total", "counter",
      "Connections to name-opened addresses on 80/443 passed through unread (address rules).",
      static_cast<int64_t>(names.passed.load()));
  add("dsec_name_check_checked_total", "counter",
      "Connections whose TLS SNI or HTTP Host was checked against the named rules.",
      static_cast<int64_t>(names.checked.load()));
  add("dsec_name_check_closed_total", "counter",
      "Connections closed because their SNI or Host names no allowed name.",
      static_cast<int64_t>(names.closed.load()));
  return out;
}

/// Per-sandbox measured memory, one series per live sandbox.
std::string memory_metrics(const std::string& node, const std::vector<sandbox_info>& infos) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto field) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (auto& i : infos)
      out += std::string{name} + "{node=\"" + node + "\",id=\"" + i.id + "\"} "
             + std::to_string(field(i)) + "\n";
  };
  family("dsec_sandbox_resident_bytes", "gauge", "Bytes the sandbox holds in RAM.",
         [](const sandbox_info& i) { return i.resident_bytes; });
  family("dsec_sandbox_swap_bytes", "gauge", "Bytes of the sandbox in compressed swap.",
         [](const sandbox_info& i) { return i.swap_bytes; });
  family("dsec_sandbox_reclaimed_bytes_total", "counter",
         "Bytes reclaim pushed out of the sandbox's RAM.",
         [](const sandbox_info& i) { return i.reclaimed_bytes; });
  family("dsec_sandbox_idle", "gauge", "1 if the sandbox used no CPU at the last sample.",
         [](const sandbox_info& i) { return int64_t{i.idle_since_ms != 0}; });
  return out;
}

/// Per-sandbox denial counters (only sandboxes with any), for reward shaping
/// dashboards and alerts.
std::string denial_metrics(const std::string& node, const std::vector<sandbox_info>& infos) {
  std::string out = "# HELP dsec_sandbox_denials_total Refused attempts per sandbox and kind.\n"
                    "# TYPE dsec_sandbox_denials_total counter\n";
  int64_t totals[3] = {0, 0, 0};
  for (auto& i : infos) {
    const std::pair<const char*, int64_t> kinds[] = {
      {"network", i.denials.network}, {"syscall", i.denials.syscall}, {"file", i.denials.file}};
    for (size_t k = 0; k < 3; ++k) {
      totals[k] += kinds[k].second;
      if (kinds[k].second > 0)
        out += "dsec_sandbox_denials_total{node=\"" + node + "\",sandbox=\"" + i.id
               + "\",kind=\"" + kinds[k].first + "\"} " + std::to_string(kinds[k].second) + "\n";
    }
  }
  out += "# HELP dsec_denials Refused attempts of the node's live sandboxes, by kind.\n"
         "# TYPE dsec_denials gauge\n";
  const char* names[] = {"network", "syscall", "file"};
  for (size_t k = 0; k < 3; ++k)
    out += "dsec_denials{node=\"" + node + "\",kind=\"" + names[k] + "\"} "
           + std::to_string(totals[k]) + "\n";
  return out;
}

void handle_status(gateway_actor_ptr self, const http_call& c, bool metrics) {
  self->request(self->state.front, list_wait(front_hop), status_atom::value)
    .then(
      [self, c, metrics](node_status& st) {
        st.pid = ::getpid();
        if (!metrics) {
          auto body = codec::encode(st);
          auto& ctx = self->state.ctx; // the node's zram swap, appended (a few sysfs reads)
          if (ctx && ctx->zram && body.size() > 2 && body.back() == '}')
            body.insert(body.size() - 1, "," + ctx->zram->health_json());
          if (ctx && ctx->swap_tier && body.size() > 2 && body.back() == '}')
            body.insert(body.size() - 1, "," + ctx->swap_tier->health_json());
          return reply(c, 200, std::move(body));
        }
        auto text = std::make_shared<std::string>(metrics_text(st, self->state));
        self->request(self->state.front, list_wait(front_hop), metrics_atom::value)
          .then(
            [c, text, node = st.node_id](std::vector<sandbox_info>& infos) {
              reply(c, 200, *text + denial_metrics(node, infos) + memory_metrics(node, infos),
                    "text/plain; version=0.0.4");
            },
            [c, text](caf::error&) { reply(c, 200, *text, "text/plain; version=0.0.4"); });
      },
      on_error(c));
}

void handle_nodes(gateway_actor_ptr self, const http_call& c) {
  self->request(self->state.front, list_wait(front_hop), nodes_atom::value)
    .then([c](std::vector<member_info>& members) { reply(c, 200, codec::encode_nodes(members)); },
          on_error(c));
}

void handle_create(gateway_actor_ptr self, const http_call& c) {
  auto spec = codec::parse_spec(c->body);
  if (!spec)
    return reply_error(c, spec.err());
  self->request(self->state.front, create_wait(front_hop), create_atom::value,
                std::move(*spec))
    .then([c](sandbox_info& info) { reply(c, 201, codec::encode(info)); }, on_error(c));
}

void handle_batch(gateway_actor_ptr self, const http_call& c) {
  auto batch = codec::parse_batch(c->body);
  if (!batch)
    return reply_error(c, batch.err());
  struct gather {
    std::vector<sandbox_info> ok;
    std::vector<error> failed;
    int left = 0;
  };
  auto g = std::make_shared<gather>();
  g->left = batch->second;
  auto finish = [c, g] {
    if (--g->left == 0)
      reply(c, g->failed.empty() ? 201 : 200, codec::encode_batch(g->ok, g->failed));
  };
  for (int i = 0; i < batch->second; ++i)
    self->request(self->state.front, create_wait(front_hop), create_atom::value, batch->first)
      .then([g, finish](sandbox_info& info) { g->ok.push_back(std::move(info)); finish(); },
            [g, finish](caf::error& err) { g->failed.push_back(from_caf(err)); finish(); });
}

void handle_list(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, list_wait(front_hop), list_atom::value, r.labels)
    .then([c](std::vector<sandbox_info>& list) { reply(c, 200, codec::encode(list)); },
          on_error(c));
}

void handle_get(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, call_wait(front_hop), info_atom::value, r.id)
    .then([c](sandbox_info& info) { reply(c, 200, codec::encode(info)); }, on_error(c));
}

/// GET /v1/sandboxes/{id}/metrics: one sample of its CPU and memory use.
void handle_metrics(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto wait = caf::duration{*ops::sbmetrics_op::deadline(ops::waits_of(hop::front))};
  self->request(self->state.front, wait, sbmetrics_atom::value, r.id)
    .then([c](sandbox_metric& m) { reply(c, 200, codec::encode(m)); }, on_error(c));
}

void handle_delete(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, call_wait(front_hop), destroy_atom::value, r.id)
    .then(
      [c, id = r.id](bool existed) {
        reply(c, 200, codec::encode_deleted(id, existed));
      },
      on_error(c));
}

/// Output of a streamed exec goes straight from the backend thread to the
/// connection; the first byte commits the 200.
struct stream_state {
  std::mutex mtx;
  bool started = false;
  void ensure_started(const http_call& c) {
    std::lock_guard<std::mutex> guard{mtx};
    if (!started) {
      started = true;
      c->begin_stream(200, "application/x-ndjson");
    }
  }
};

bool query_flag(const route& r, const char* name) {
  auto it = r.query.find(name);
  return it != r.query.end() && (it->second == "1" || it->second == "true");
}

/// POST .../exec?background=1: answered once the command runs, with its pid;
/// it outlives the request (no cancel on disconnect).
void handle_background(gateway_actor_ptr self, const http_call& c, const route& r,
                       exec_request req) {
  if (query_flag(r, "stream"))
    return reply_error(c, invalid_argument("exec: background=1 and stream=1 cannot be combined; "
                                           "read a background command's output with GET "
                                           "/v1/sandboxes/{id}/processes/{pid}"));
  self->request(self->state.front, call_wait(front_hop), bgexec_atom::value, r.id, std::move(req))
    .then([c](background_process& p) { reply(c, 201, codec::encode(p)); }, on_error(c));
}

void handle_exec(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto req = codec::parse_exec(c->body);
  if (!req)
    return reply_error(c, req.err());
  if (query_flag(r, "background"))
    return handle_background(self, c, r, std::move(*req));
  caf::duration timeout = caf::infinite;
  if (auto wait = exec_wait(req->timeout_s, front_hop))
    timeout = caf::duration{*wait};
  auto it = r.query.find("stream");
  bool stream = it != r.query.end() && (it->second == "1" || it->second == "true");
  // A client that goes away takes its command with it.
  auto token = self->state.next_token++;
  c->on_disconnect([lc = self->state.front, id = r.id, token] {
    caf::anon_send(lc, cancel_atom::value, id, token);
  });
  if (!stream) {
    self->request(self->state.front, timeout, exec_atom::value, r.id, std::move(*req), token)
      .then([c](exec_result& res) { reply(c, 200, codec::encode(res)); }, on_error(c));
    return;
  }
  // The chunks reach the relay before the answer reaches us: the answer is
  // written once the relay has fed them all (actors/chunk_relay.hpp).
  auto ss = std::make_shared<stream_state>();
  auto relay = spawn_chunk_relay(self, [c, ss](exec_chunk chunk) {
    ss->ensure_started(c);
    c->write_chunk(codec::encode_event(chunk));
  });
  self->request(self->state.front, timeout, stream_atom::value, r.id, std::move(*req), relay,
                token)
    .then(
      [self, c, ss, relay](exec_result& res) {
        drain_chunk_relay(self, relay, [c, ss, res] {
          ss->ensure_started(c);
          c->write_chunk(codec::encode_exit_event(res));
          c->end_stream();
        });
      },
      [self, c, ss, relay](caf::error& err) {
        drain_chunk_relay(self, relay, [c, ss, err = from_caf(err)] {
          bool started;
          {
            std::lock_guard<std::mutex> guard{ss->mtx};
            started = ss->started;
          }
          if (!started)
            return reply_error(c, err);
          c->write_chunk(codec::encode(err) + "\n");
          c->end_stream();
        });
      });
}

expected<std::string> file_path(const route& r) {
  auto it = r.query.find("path");
  if (it == r.query.end() || it->second.empty())
    return invalid_argument("files: query parameter path=/absolute/path is required");
  // The one grammar of sandbox paths (core/sandbox_path.hpp).
  if (auto parts = parse_sandbox_path(it->second, path_form::entry); !parts)
    return invalid_argument("files: " + parts.err().message);
  return it->second;
}

void handle_put_file(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto path = file_path(r);
  if (!path)
    return reply_error(c, path.err());
  self->request(self->state.front, call_wait(front_hop), wfile_atom::value, r.id, *path, c->body)
    .then(
      [c, p = *path, n = c->body.size()](bool) {
        reply(c, 200, codec::encode_file_written(p, n));
      },
      on_error(c));
}

void handle_get_file(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto path = file_path(r);
  if (!path)
    return reply_error(c, path.err());
  uint64_t max = self->state.ctx->config.max_file_bytes;
  self->request(self->state.front, call_wait(front_hop), rfile_atom::value, r.id, *path, max)
    .then([c](std::string& data) { reply(c, 200, std::move(data), "application/octet-stream"); },
          on_error(c));
}

void handle_pause(gateway_actor_ptr self, const http_call& c, const route& r, bool pause) {
  auto keep_memory = pause ? codec::parse_pause(c->body) : expected<bool>(true);
  if (!keep_memory)
    return reply_error(c, keep_memory.err());
  auto bound = call_wait(front_hop);
  auto req = !pause         ? self->request(self->state.front, bound, resume_atom::value, r.id)
             : *keep_memory ? self->request(self->state.front, bound, pause_atom::value, r.id)
                            : self->request(self->state.front, bound, pausefiles_atom::value,
                                            r.id);
  req.then([c](sandbox_info& info) { reply(c, 200, codec::encode(info)); }, on_error(c));
}

/// POST /v1/sandboxes:pause|:resume {"labels":{...}}: a whole job,
/// cluster-wide (actors/job_ops.hpp); 200 with the ids done and per-item errors.
void handle_job(gateway_actor_ptr self, const http_call& c, bool pause) {
  const char* action = pause ? "pause" : "resume";
  auto labels = codec::parse_job(c->body, std::string{action} + " job");
  if (!labels)
    return reply_error(c, labels.err());
  self->request(self->state.front, job_wait(front_hop), job_atom::value, *labels, pause)
    .then([c, action, labels = *labels](job_result& res) {
            reply(c, 200, codec::encode_job(action, labels, res));
          },
          on_error(c));
}

void handle_snapshot(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto req = codec::parse_snapshot(c->body);
  if (!req)
    return reply_error(c, req.err());
  self->request(self->state.front, call_wait(front_hop), snapshot_atom::value, r.id, req->name,
                req->version)
    .then([c](snapshot_info& snap) { reply(c, 201, codec::encode(snap)); }, on_error(c));
}

void handle_network(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto policy = codec::parse_network_policy(c->body);
  if (!policy)
    return reply_error(c, policy.err());
  self->request(self->state.front, call_wait(front_hop), network_atom::value, r.id, *policy)
    .then([c, id = r.id](bool) { reply(c, 200, R"({"id":")" + id + R"(","network":"updated"})"); },
          on_error(c));
}

/// PATCH /v1/sandboxes/{id}: cpu class, then network, applied together;
/// answers the sandbox info with what was applied.
void handle_update(gateway_actor_ptr self, const http_call& c, const route& r) {
  auto up = codec::parse_update(c->body);
  if (!up)
    return reply_error(c, up.err());
  self->request(self->state.front, call_wait(front_hop), update_atom::value, r.id, up->cpu_class,
                up->set_network, up->network)
    .then([c, applied = *up](sandbox_info& info) {
            reply(c, 200, codec::encode_update(info, applied));
          },
          on_error(c));
}

void handle_fncall(gateway_actor_ptr self, const http_call& c) {
  auto req = codec::parse_fncall(c->body);
  if (!req)
    return reply_error(c, req.err());
  // timeout_s is in (0, 300] here (parse_fncall validated it).
  auto timeout = caf::duration{exec_wait(req->timeout_s, front_hop).value_or(
    call_wait(front_hop))};
  self->request(self->state.front, timeout, fncall_atom::value, std::move(*req))
    .then([c](exec_result& res) { reply(c, 200, codec::encode(res)); }, on_error(c));
}

void handle_list_processes(gateway_actor_ptr self, const http_call& c, const route& r) {
  self->request(self->state.front, call_wait(front_hop), procs_atom::value, r.id)
    .then([c](std::vector<process_info>& list) { reply(c, 200, codec::encode(list)); },
          on_error(c));
}

/// GET .../processes/{pid}[?wait=1&timeout_s=N]: a background command's state
/// and output; with wait, answered when it ends or after timeout_s (default
/// 30, at most 3600) with state still "running".
void handle_get_process(gateway_actor_ptr self, const http_call& c, const route& r) {
  int64_t wait_ms = 0;
  if (query_flag(r, "wait")) {
    double secs = 30;
    if (auto it = r.query.find("timeout_s"); it != r.query.end()) {
      char* end = nullptr;
      secs = std::strtod(it->second.c_str(), &end);
      if (it->second.empty() || *end != 0 || !(secs >= 0) || secs > 3600)
        return reply_error(c, invalid_argument("timeout_s: must be a number between 0 and 3600, "
                                               "got \"" + it->second.substr(0, 64) + "\""));
    }
    wait_ms = static_cast<int64_t>(secs * 1000);
  }
  auto bound = caf::duration{call_wait_after(front_hop, wait_ms)};
  self->request(self->state.front, bound, proc_atom::value, r.id, r.pid, wait_ms)
    .then([c](background_process& p) { reply(c, 200, codec::encode(p)); }, on_error(c));
}

/// DELETE .../processes/{pid}[?signal=N] or POST .../processes/{pid}/kill
/// {"signal": N}; `group=1` signals the process group.
void handle_kill_process(gateway_actor_ptr self, const http_call& c, const route& r) {
  expected<int32_t> sig = 9;
  if (c->method == "POST")
    sig = codec::parse_kill(c->body);
  else if (auto it = r.query.find("signal"); it != r.query.end())
    sig = codec::parse_signal_value(it->second);
  if (!sig)
    return reply_error(c, sig.err());
  bool group = query_flag(r, "group");
  self->request(self->state.front, call_wait(front_hop), signal_atom::value, r.id, r.pid, *sig,
                group)
    .then(
      [c, pid = r.pid, signo = *sig, group](bool) {
        reply(c, 200, "{\"pid\":" + std::to_string(pid) + ",\"signal\":" + std::to_string(signo)
                        + ",\"group\":" + (group ? "true" : "false") + "}");
      },
      on_error(c));
}

void handle_layers(gateway_actor_ptr self, const http_call& c) {
  self->request(self->state.front, call_wait(front_hop), layers_atom::value)
    .then([c](std::vector<layer_info>& layers) { reply(c, 200, codec::encode(layers)); },
          on_error(c));
}

void dispatch(gateway_actor_ptr self, const http_call& c) {
  ++self->state.requests_total;
  // Ports (issue 26 part 3): a port inside a sandbox, by path, Host or E2B's
  // headers; it checks its own keys and tokens (actors/gateway_ports.hpp).
  if (ports::dispatch(self, c))
    return;
  // The E2B API (actors/e2b_gateway.hpp) checks its own keys and tokens.
  if (e2b::dispatch({self, self->state.front, self->state.ctx}, c))
    return;
  if (auto& keys = self->state.ctx->config.api_keys;
      !keys.empty() && !key_matches(keys, c->header("x-api-key"))
      && !key_matches(keys, bearer_key(c->header("authorization")))) {
    ++self->state.errors_total;
    http_answer a;
    a.status = 401;
    a.body = "{\"error\":{\"code\":\"unauthenticated\",\"message\":\"a valid API key is "
             "required (X-API-Key: KEY or Authorization: Bearer KEY)\"}}";
    a.headers.emplace_back("WWW-Authenticate", "Bearer");
    return c->respond(std::move(a));
  }
  bool not_allowed = false;
  auto r = parse_route(c->method, c->target, not_allowed);
  if (!r) {
    ++self->state.errors_total;
    return reply_error(c, r.err(), not_allowed ? 405 : 0);
  }
  switch (r->kind) {
    case route::healthz: return handle_status(self, c, false);
    case route::metrics: return handle_status(self, c, true);
    case route::list_layers: return handle_layers(self, c);
    case route::list_nodes: return handle_nodes(self, c);
    case route::create: return handle_create(self, c);
    case route::create_batch: return handle_batch(self, c);
    case route::list_sandboxes: return handle_list(self, c, *r);
    case route::get_sandbox: return handle_get(self, c, *r);
    case route::delete_sandbox: return handle_delete(self, c, *r);
    case route::exec: return handle_exec(self, c, *r);
    case route::put_file: return handle_put_file(self, c, *r);
    case route::get_file: return handle_get_file(self, c, *r);
    case route::pause: return handle_pause(self, c, *r, true);
    case route::resume: return handle_pause(self, c, *r, false);
    case route::snapshot: return handle_snapshot(self, c, *r);
    case route::set_network: return handle_network(self, c, *r);
    case route::update_sandbox: return handle_update(self, c, *r);
    case route::fncall: return handle_fncall(self, c);
    case route::list_processes: return handle_list_processes(self, c, *r);
    case route::get_process: return handle_get_process(self, c, *r);
    case route::kill_process: return handle_kill_process(self, c, *r);
    case route::pause_job: return handle_job(self, c, true);
    case route::resume_job: return handle_job(self, c, false);
    case route::trajectory: return handle_trajectory(self, c, *r);
    case route::replay: return handle_replay(self, c, *r);
    case route::sandbox_metrics: return handle_metrics(self, c, *r);
    case route::follow_process: return handle_follow_process(self, c, *r); // issue 24 part 2
    case route::pty_open: // terminals (issue 26 part 1)
    case route::pty_get:
    case route::pty_input:
    case route::pty_resize:
    case route::pty_kill: return handle_pty(self, c, *r);
    case route::session_open: return handle_session_open(self, c, *r); // issue 26 part 2
    case route::session_list: return handle_session_list(self, c, *r);
    case route::session_run: return handle_session_run(self, c, *r);
    case route::session_close: return handle_session_close(self, c, *r);
  }
}

} // namespace

void gateway_reply(const http_call& c, int status, std::string body, std::string content_type) {
  reply(c, status, std::move(body), std::move(content_type));
}

void gateway_reply_error(const http_call& c, const error& err) { reply_error(c, err); }

gateway_actor::behavior_type gateway_behavior(gateway_actor_ptr self, node_context_ptr ctx,
                                              placement_actor front) {
  self->state.ctx = std::move(ctx);
  self->state.front = std::move(front);
  // E2B's templates and builds as recorded before a restart (issue 27).
  e2b::preload_templates({self, self->state.front, self->state.ctx});
  return {
    [self](http_atom, http_call& c) { dispatch(self, c); },
    // INTERNAL: timed steps of E2B streams (a WatchDir's deadline, actors/e2b_envd.cpp).
    [](cont_atom, continuation& k) { k.fn(); },
  };
}

} // namespace dsec
