// E2B's template builds inside a node: what the gateway's handlers
// (e2b_templates.cpp) and the build runner (e2b_template_build.cpp) share.
//
// The node keeps its templates (name -> tag -> layer) in memory, loaded from
// the store's record (api/e2b_templates.hpp) and written back on every
// change, and its builds (status and log) in memory only: a build outlives
// neither its node process nor the node's restart.
//
// A build runs as `dsec layer build --dockerfile` (cmd/layer_build_cmd.hpp),
// a child of the node started from a thread of its own: the builder drives
// the node over REST (each RUN in a sandbox, its snapshot a step layer,
// steps cached by instruction and parent) and flattens the steps in a mount
// namespace of its own, which a node process cannot enter. Its output lines
// are the build's log. The child dies with that thread (PR_SET_PDEATHSIG),
// so a stopped node leaves no build running.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/node_context.hpp"
#include "api/e2b_templates.hpp"

namespace dsec::e2b {

/// One build: requested (`waiting`), then `building`, then `ready` or `error`.
struct template_build {
  std::string id;
  std::string template_name;
  std::vector<std::string> tags;
  double cpu = 0;
  int64_t memory_mb = 0;
  std::string status = "waiting";
  std::vector<build_log> logs;
  std::string reason;
  std::string step;
};

/// The templates and builds of one store, shared by the gateway and build
/// threads; every field under `mutex`.
struct template_registry {
  std::mutex mutex;
  bool loaded = false;
  /// Why the record could not be read (a corrupt file): nothing is written
  /// back over it, and builds fail naming this.
  std::string load_error;
  template_map templates;
  std::map<std::string, template_build> builds;

  /// The registry of the store at `root` (one per store in a process).
  static template_registry& of(const std::string& root);
};

/// What a build runs: its id, the parsed steps, and the node it asks.
struct build_job {
  std::string build_id;
  std::string store_root;
  build_start start;
  node_context_ptr ctx;
};

/// Starts the build on a thread of its own; its status and log go into
/// `reg` as they come. Never blocks the caller.
void start_template_build(template_registry& reg, build_job job);

/// Where uploaded COPY files are kept: <store>/e2b_template_files/<hash>.tar.
std::string template_files_path(const std::string& root, const std::string& hash);

} // namespace dsec::e2b
