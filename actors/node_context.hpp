// node_context: what a node's actors share: its identity and configuration,
// the backend, the layer store and mount cache, and the worker pool for
// blocking work. Built once by the node before any actor starts; outlives them.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "actors/layer_source.hpp"
#include "backends/backend.hpp"
#include "sys/worker_pool.hpp"

namespace dsec {

/// Node-wide settings (from `dsec node` flags).
struct node_config {
  std::string node_id;
  /// Root of this node's local state (sandboxes, layer mounts).
  std::string state_dir = "/var/lib/dsec";
  /// Root of the layer store (default <state_dir>/store).
  std::string store_dir;
  std::string rest = "127.0.0.1:7070";
  std::string listen = "127.0.0.1:7700";
  /// Largest request body the gateway reads (file uploads); 413 beyond.
  size_t max_body_bytes = 256u << 20;
  /// Largest file GET answers; 413 beyond (whole file is held in memory).
  size_t max_file_bytes = 256u << 20;
  /// Sandboxes this node accepts at once; 429 beyond. Sized for 24 GiB.
  size_t max_sandboxes = 4096;
};

/// Shared, thread-safe services of one node.
struct node_context {
  node_config config;
  std::shared_ptr<backends::backend> container;
  std::shared_ptr<layer_source> layers;
  /// The mount cache behind `layers` (the node unmounts everything at exit);
  /// null in tests.
  std::shared_ptr<layers::mount_cache> mounts;
  std::shared_ptr<sys::worker_pool> pool;
  int64_t started_at_ms = 0;
  std::atomic<int64_t> execs_total{0};

  /// <state_dir>/sandboxes/<id>: the per-sandbox directory.
  std::string sandbox_dir(const std::string& id) const {
    return config.state_dir + "/sandboxes/" + id;
  }
};

using node_context_ptr = std::shared_ptr<node_context>;

} // namespace dsec
