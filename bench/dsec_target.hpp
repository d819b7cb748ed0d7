// dsec as a system under test, driven only through the node's public REST API
// (DESIGN.md §4): POST /v1/sandboxes, POST /v1/sandboxes/{id}/exec,
// DELETE /v1/sandboxes/{id}, GET /healthz. Memory is the node's RSS plus the
// PSS of the sandbox processes found in the node's memory cgroup tree and
// below the node's process tree, plus the cgroup's usage counter.
#pragma once

#include <sys/types.h>

#include <string>

#include "bench/target.hpp"
#include "sys/http_client.hpp"

namespace dsec::bench {

/// Where to find the node and what to create.
struct dsec_target_config {
  std::string host = "127.0.0.1";
  uint16_t port = 7070;
  /// The layer every bench sandbox is created from.
  std::string layer = "base/busybox@1";
  /// The node's pid; -1 = ask /healthz, then look for a `dsec node` process.
  pid_t node_pid = -1;
  /// The v1 memory cgroup under which the node puts its sandboxes; its
  /// subdirectory named after the node (from /healthz "node") if that exists.
  std::string cgroup = "/sys/fs/cgroup/memory/dsec";
};

/// GET /healthz; fails with unavailable naming host:port if the node does not answer 2xx.
expected<nlohmann::json> probe_node(const std::string& host, uint16_t port);

/// The dsec node behind its REST gateway.
class dsec_target : public bench_target {
 public:
  /// `health` is the /healthz answer (may carry the node's pid).
  dsec_target(dsec_target_config cfg, const nlohmann::json& health);

  [[nodiscard]] std::string name() const override { return "dsec"; }
  expected<double> create_first_output() override;
  status start_exec_sandbox() override;
  expected<double> exec_true() override;
  void stop_exec_sandbox() override;
  std::unique_ptr<bench_worker> make_worker() override;
  memory_reading read_memory(const std::vector<std::string>& handles) override;
  nlohmann::json notes() override;

 private:
  dsec_target_config cfg_;
  sys::http_client client_;
  std::string exec_id_;
  std::string pid_source_;
};

} // namespace dsec::bench
