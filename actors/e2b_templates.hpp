// E2B's template builds inside a node: what the gateway's handlers
// (e2b_templates.cpp) and the build runner (e2b_template_build.cpp) share.
//
// The node keeps its templates (name -> tag -> layer) in memory, loaded from
// the store's record (api/e2b_templates.hpp) and written back on every
// change, and its builds (status and log) in memory and in the node's state
// dir (api/e2b_template_builds.hpp), so their status answers after a restart;
// a build running when the node stops fails (its builder dies with the node).
//
// A build runs as `dsec layer build --dockerfile` (cmd/layer_build_cmd.hpp),
// a child of the node started from a thread of its own: the builder drives
// the node over REST (each RUN in a sandbox, its snapshot a step layer,
// steps cached by instruction and parent) and flattens the steps in a mount
// namespace of its own, which a node process cannot enter. Its output lines
// are the build's log. The child dies with that thread (PR_SET_PDEATHSIG),
// so a stopped node leaves no build running.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/node_context.hpp"
#include "api/e2b_start_cmd.hpp"
#include "api/e2b_template_builds.hpp"
#include "api/e2b_templates.hpp"
#include "sys/http_client.hpp"
#include "sys/worker_pool.hpp"

namespace dsec::e2b {

/// The templates and builds of one store, shared by the gateway and build
/// threads; every field under `mutex`.
struct template_registry {
  std::mutex mutex;
  bool loaded = false;
  /// Why the record could not be read (a corrupt file): nothing is written
  /// back over it, and builds fail naming this.
  std::string load_error;
  template_map templates;
  build_map builds;
  /// Where the builds are recorded (<state-dir>/e2b_template_builds.json),
  /// set when the record is loaded.
  std::string builds_path;
  /// Bumped at each change of the builds; a record write older than the
  /// last one written is dropped (writes may finish out of order).
  uint64_t builds_seq = 0;
  uint64_t builds_written = 0;

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

/// What a start reads of the node's records: its store's templates and its
/// own builds.
struct registry_records {
  expected<template_map> templates;
  expected<build_map> builds;
};

/// Blocking: reads both records. A corrupt builds record is moved aside
/// (<path>.corrupt) so the next write does not bury it.
registry_records read_registry_records(const std::string& store_root,
                                       const std::string& builds_path);

/// Puts `got` into `reg` once (later loads are ignored); what is corrupt is
/// logged naming the file, and the node goes on without it.
void apply_registry_records(template_registry& reg, registry_records& got,
                            const std::string& builds_path, const std::string& node_id);

/// Blocking: writes the builds as they are now to their record (a failure
/// is logged: the builds still answer from memory).
void record_builds(template_registry& reg);

/// Writes the builds' record on `pool`, never blocking the caller.
void record_builds_later(template_registry& reg, sys::worker_pool& pool);

/// A client of this node's REST port (0.0.0.0 as 127.0.0.1), with its API key.
[[nodiscard]] expected<sys::http_client> node_client(const node_config& cfg);

/// Blocking: runs the start command and waits for the ready command in a
/// sandbox of the built `layer` (destroyed after), as E2B's build does; an
/// error names the command that failed and how.
[[nodiscard]] status check_start_in_build(const node_config& cfg, const std::string& layer,
                                          const template_start& t,
                                          const std::function<void(const std::string&)>& log);

/// Where uploaded COPY files are kept: <store>/e2b_template_files/<hash>.tar.
std::string template_files_path(const std::string& root, const std::string& hash);

} // namespace dsec::e2b
