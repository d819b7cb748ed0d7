// inspect() overloads that let CAF serialize the shared vocabulary
// (core/types.hpp), so the structs cross actor and process boundaries. Only
// actor code includes this header; the wire names are registered once in
// actors/wire_types.cpp. Field order is the wire order: append only.
#pragma once

#include <caf/meta/type_name.hpp>

#include "core/types.hpp"

namespace dsec {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, network_policy& x) {
  return f(caf::meta::type_name("dsec::network_policy"), x.allow);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, protect_policy& x) {
  return f(caf::meta::type_name("dsec::protect_policy"), x.readonly, x.hidden);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_spec& x) {
  return f(caf::meta::type_name("dsec::sandbox_spec"), x.backend, x.layers, x.cpu,
           x.memory_mb, x.disk_mb, x.pids, x.ttl_s, x.network, x.protect, x.env, x.labels,
           x.cpu_class, x.node, x.request_id, x.paused_ttl_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_request& x) {
  return f(caf::meta::type_name("dsec::exec_request"), x.argv, x.cwd, x.env, x.stdin_data,
           x.timeout_s, x.received_ns, x.step);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_result& x) {
  return f(caf::meta::type_name("dsec::exec_result"), x.exit_code, x.stdout_data,
           x.stderr_data, x.timed_out, x.duration_ms, x.truncated, x.node_ms, x.replayed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_chunk& x) {
  return f(caf::meta::type_name("dsec::exec_chunk"), x.stream, x.data);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fncall_request& x) {
  return f(caf::meta::type_name("dsec::fncall_request"), x.language, x.code, x.stdin_data,
           x.timeout_s, x.files);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, snapshot_info& x) {
  return f(caf::meta::type_name("dsec::snapshot_info"), x.ref, x.digest, x.layers,
           x.size_bytes, x.duration_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, denial_counts& x) {
  return f(caf::meta::type_name("dsec::denial_counts"), x.network, x.syscall, x.file, x.recent);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_info& x) {
  return f(caf::meta::type_name("dsec::sandbox_info"), x.id, x.node, x.state, x.backend,
           x.layers, x.labels, x.created_at_ms, x.expires_at_ms, x.reason, x.cpu, x.memory_mb,
           x.disk_mb, x.denials, x.resident_bytes, x.swap_bytes, x.reclaimed_bytes,
           x.idle_since_ms, x.cpu_class, x.ttl_s, x.paused_ttl_s, x.ttl_left_ms,
           x.paused_expires_at_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_info& x) {
  return f(caf::meta::type_name("dsec::layer_info"), x.ref, x.name, x.version, x.kind,
           x.digest, x.size_bytes, x.created_at_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, backend_status& x) {
  return f(caf::meta::type_name("dsec::backend_status"), x.name, x.available, x.reason, x.accel,
           x.accel_reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_status& x) {
  return f(caf::meta::type_name("dsec::node_status"), x.node_id, x.version, x.sandboxes,
           x.creating, x.uptime_ms, x.creates_total, x.create_failures_total,
           x.destroys_total, x.execs_total, x.pid, x.layers, x.backends, x.resident_bytes,
           x.swap_bytes, x.reclaimed_bytes_total, x.idle_sandboxes, x.memory_available_mb,
           x.memory_free_mb);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_info& x) {
  return f(caf::meta::type_name("dsec::member_info"), x.id, x.address, x.state, x.incarnation,
           x.free_memory_mb, x.cpu_load, x.sandboxes, x.creating, x.accepting, x.layers);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, process_info& x) {
  return f(caf::meta::type_name("dsec::process_info"), x.pid, x.ppid, x.argv, x.name, x.state,
           x.started_at_ms, x.background);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, background_process& x) {
  return f(caf::meta::type_name("dsec::background_process"), x.pid, x.argv, x.started_at_ms,
           x.running, x.result);
}

} // namespace dsec
