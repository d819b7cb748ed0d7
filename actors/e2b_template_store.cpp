// The node's E2B templates and builds kept across restarts (e2b_templates.hpp):
// the registry of a store, its records read at start and the builds record
// written at every change of a build's status, off the actors' threads.
#include "actors/e2b_templates.hpp"

#include <cstdio>
#include <iostream>

namespace dsec::e2b {

namespace {

/// Serializes the builds record's writes within the process.
std::mutex& builds_file_mutex() {
  static std::mutex m;
  return m;
}

} // namespace

template_registry& template_registry::of(const std::string& root) {
  // Never destroyed: build threads may outlive static destruction at exit.
  static auto* all = new std::map<std::string, std::unique_ptr<template_registry>>;
  static std::mutex m;
  std::lock_guard<std::mutex> lock{m};
  auto& r = (*all)[root];
  if (!r)
    r = std::make_unique<template_registry>();
  return *r;
}

registry_records read_registry_records(const std::string& store_root,
                                       const std::string& builds_path) {
  registry_records out{read_templates(store_root), read_builds(builds_path)};
  if (!out.builds) {
    auto aside = builds_path + ".corrupt";
    if (std::rename(builds_path.c_str(), aside.c_str()) == 0)
      out.builds = error{out.builds.err().code,
                         out.builds.err().message + " (moved to " + aside + ")"};
  }
  return out;
}

void apply_registry_records(template_registry& reg, registry_records& got,
                            const std::string& builds_path, const std::string& node_id) {
  std::lock_guard<std::mutex> lock{reg.mutex};
  if (reg.loaded)
    return;
  reg.loaded = true; // once: a corrupt record is not read again
  reg.builds_path = builds_path;
  if (got.templates) {
    reg.templates = std::move(*got.templates);
  } else {
    reg.load_error = got.templates.err().message;
    std::cerr << "dsec node " << node_id << ": e2b templates: " << reg.load_error
              << " (built templates are unknown until it is repaired)" << std::endl;
  }
  if (got.builds) {
    for (auto& [id, b] : *got.builds)
      reg.builds.emplace(id, std::move(b));
  } else {
    std::cerr << "dsec node " << node_id << ": e2b template builds: " << got.builds.err().message
              << "; starting with no recorded builds" << std::endl;
  }
}

void record_builds(template_registry& reg) {
  std::string text, path;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    if (reg.builds_path.empty())
      return; // not loaded: nothing of this node's to record yet
    text = encode_builds(reg.builds);
    path = reg.builds_path;
    seq = ++reg.builds_seq;
  }
  std::lock_guard<std::mutex> file_lock{builds_file_mutex()};
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    if (seq <= reg.builds_written)
      return; // a newer state is already on disk
  }
  if (auto st = write_builds(path, text); !st) {
    std::cerr << "e2b template builds: record " << path << ": " << st.err().message << std::endl;
    return;
  }
  std::lock_guard<std::mutex> lock{reg.mutex};
  reg.builds_written = seq;
}

void record_builds_later(template_registry& reg, sys::worker_pool& pool) {
  pool.post([&reg] { record_builds(reg); });
}

} // namespace dsec::e2b
