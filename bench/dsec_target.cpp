// The REST calls of the dsec target, and its memory reading.
#include "bench/dsec_target.hpp"

#include <algorithm>
#include <set>
#include <thread>

#include "bench/memory.hpp"
#include "bench/stats.hpp"

namespace dsec::bench {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// One REST call: fails unless the status is 2xx; the error carries the
// gateway's {"error":{"code","message"}} when there is one.
expected<json> call(sys::http_client& c, std::string_view method, const std::string& target,
                    const std::string& body = {}) {
  auto resp = c.request(method, target, body, "application/json", 120s);
  if (!resp)
    return resp.err();
  auto j = json::parse(resp->body, nullptr, false);
  if (resp->status >= 200 && resp->status < 300)
    return j.is_discarded() ? json::object() : j;
  auto what = std::string(method) + ' ' + target + ": HTTP " + std::to_string(resp->status);
  errc code = resp->status == 404 ? errc::not_found : errc::internal;
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) {
    code = errc_from_string(j["error"].value("code", ""));
    what += ' ' + j["error"].value("code", "") + ": " + j["error"].value("message", "");
  } else {
    what += ": " + resp->body.substr(0, 200);
  }
  return error{code, what};
}

expected<std::string> create(sys::http_client& c, const std::string& layer) {
  auto r = call(c, "POST", "/v1/sandboxes", json{{"layers", {layer}}}.dump());
  if (!r)
    return r.err();
  if (!r->contains("id") || !(*r)["id"].is_string())
    return internal_error("POST /v1/sandboxes: answer has no string 'id': " + r->dump());
  auto id = (*r)["id"].get<std::string>();
  // A create answered while still "creating" is not a usable sandbox yet:
  // wait for it, so the burst counts ready sandboxes only.
  auto state = r->value("state", "running");
  for (int i = 0; state == "creating" && i < 30000; ++i) {
    std::this_thread::sleep_for(2ms);
    auto g = call(c, "GET", "/v1/sandboxes/" + id);
    if (!g)
      return g.err();
    state = g->value("state", "running");
  }
  if (state != "running")
    return internal_error("create sandbox " + id + ": state '" + state + "', not running");
  return id;
}

expected<json> exec(sys::http_client& c, const std::string& id, const json& cmd) {
  auto r = call(c, "POST", "/v1/sandboxes/" + id + "/exec", json{{"cmd", cmd}}.dump());
  if (!r)
    return r.err();
  if (r->value("exit_code", -1) != 0)
    return internal_error("exec " + cmd.dump() + " in " + id + ": " + r->dump());
  return r;
}

status destroy(sys::http_client& c, const std::string& id) {
  auto r = call(c, "DELETE", "/v1/sandboxes/" + id);
  if (!r && r.err().code != errc::not_found)
    return r.err();
  return {};
}

class dsec_worker : public bench_worker {
 public:
  dsec_worker(const dsec_target_config& cfg) : client_(cfg.host, cfg.port), layer_(cfg.layer) {}
  expected<std::string> create_idle() override { return create(client_, layer_); }
  status destroy(const std::string& id) override { return bench::destroy(client_, id); }

 private:
  sys::http_client client_;
  std::string layer_;
};

} // namespace

expected<json> probe_node(const std::string& host, uint16_t port) {
  sys::http_client c(host, port);
  auto r = c.request("GET", "/healthz", {}, {}, 5s);
  if (!r)
    return unavailable("probe dsec node: " + r.err().message);
  if (r->status < 200 || r->status >= 300)
    return unavailable("probe dsec node " + c.endpoint() + ": GET /healthz answered HTTP " +
                       std::to_string(r->status));
  auto j = json::parse(r->body, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

dsec_target::dsec_target(dsec_target_config cfg, const json& health)
  : cfg_(std::move(cfg)), client_(cfg_.host, cfg_.port) {
  // The container backend nests sandboxes as <root>/<node-id>/<sandbox>; other
  // nodes on the same machine share <root>, so narrow it to this node's dir.
  if (health.is_object() && health.contains("node") && health["node"].is_string()) {
    auto own = cfg_.cgroup + "/" + health["node"].get<std::string>();
    if (!read_small_file(own + "/memory.usage_in_bytes").empty())
      cfg_.cgroup = own;
  }
  if (health.is_object() && health.contains("pid") && health["pid"].is_number_integer()) {
    cfg_.node_pid = health["pid"].get<pid_t>();
    pid_source_ = "/healthz pid";
  } else if (cfg_.node_pid > 0) {
    pid_source_ = "--node-pid";
  } else {
    cfg_.node_pid = find_dsec_node();
    pid_source_ = cfg_.node_pid > 0 ? "process named dsec with argv[1]=node" : "not found";
  }
}

expected<double> dsec_target::create_first_output() {
  stopwatch sw;
  auto id = create(client_, cfg_.layer);
  if (!id)
    return id.err();
  auto r = exec(client_, *id, "echo hi");
  double ms = sw.ms();
  auto d = destroy(client_, *id);
  if (!r)
    return r.err();
  if (r->value("stdout", "") != "hi\n")
    return internal_error("exec 'echo hi' in " + *id + ": unexpected stdout " + r->dump());
  if (!d)
    return d.err();
  return ms;
}

status dsec_target::start_exec_sandbox() {
  auto id = create(client_, cfg_.layer);
  if (!id)
    return id.err();
  exec_id_ = *id;
  return {};
}

expected<double> dsec_target::exec_true() {
  stopwatch sw;
  auto r = exec(client_, exec_id_, json::array({"true"}));
  if (!r)
    return r.err();
  return sw.ms();
}

void dsec_target::stop_exec_sandbox() {
  if (!exec_id_.empty())
    (void)destroy(client_, exec_id_);
  exec_id_.clear();
}

std::unique_ptr<bench_worker> dsec_target::make_worker() {
  return std::make_unique<dsec_worker>(cfg_);
}

memory_reading dsec_target::read_memory(const std::vector<std::string>&) {
  memory_reading m;
  auto node = cfg_.node_pid;
  if (node > 0)
    m.manager_kb = read_proc_mem(node).rss_kb;
  // Sandbox processes: in the node's cgroup tree, or below the node's process
  // tree (whichever the node uses), each counted once, the node excluded.
  auto in_cgroup = cgroup_tree_procs(cfg_.cgroup);
  std::set<pid_t> pids(in_cgroup.begin(), in_cgroup.end());
  if (node > 0)
    for (auto p : with_descendants({node}))
      pids.insert(p);
  pids.erase(node);
  m.sandbox_kb = sum_proc_mem({pids.begin(), pids.end()}).pss_kb;
  m.cgroup_kb = cgroup_usage_kb(cfg_.cgroup);
  return m;
}

json dsec_target::notes() {
  return {{"node_pid", cfg_.node_pid},
          {"node_pid_source", pid_source_},
          {"memory_cgroup", cfg_.cgroup},
          {"create_first_output", "POST /v1/sandboxes + POST exec {\"cmd\":\"echo hi\"} on one "
                                  "keep-alive connection; DELETE after, untimed"},
          {"exec_true", "POST exec {\"cmd\":[\"true\"]} in one running sandbox"},
          {"burst", "POST /v1/sandboxes, one keep-alive connection per thread"}};
}

} // namespace dsec::bench
