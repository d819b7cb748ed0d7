// inspect() overloads that let CAF serialize the shared vocabulary
// (core/types.hpp), so the structs cross actor and process boundaries. Only
// actor code includes this header; the wire names are registered once in
// actors/wire_types.cpp. Field order is the wire order: append only. The
// spec and sandbox info (and their nested policies and denial counts) take
// their order from core/spec_fields.hpp.
#pragma once

#include <caf/meta/type_name.hpp>

#include "core/spec_fields.hpp"
#include "core/types.hpp"

namespace dsec {

/// The fields of `x` in the order of its list (core/spec_fields.hpp), which
/// is the wire order: the spec and the sandbox info are written out there once.
template <class Inspector, class T>
typename Inspector::result_type inspect_fields(Inspector& f, const char* type_name, T& x) {
  return apply_members(x, [&](auto&... member) {
    return f(caf::meta::type_name(type_name), member...);
  });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, network_policy& x) {
  return inspect_fields(f, "dsec::network_policy", x);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, protect_policy& x) {
  return inspect_fields(f, "dsec::protect_policy", x);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_spec& x) {
  return inspect_fields(f, "dsec::sandbox_spec", x);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exec_request& x) {
  return f(caf::meta::type_name("dsec::exec_request"), x.argv, x.cwd, x.env, x.stdin_data,
           x.timeout_s, x.received_ns, x.step, x.user);
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
typename Inspector::result_type inspect(Inspector& f, sandbox_metric& x) {
  return f(caf::meta::type_name("dsec::sandbox_metric"), x.timestamp_ms, x.cpu_count,
           x.cpu_used_pct, x.mem_used, x.mem_total);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, snapshot_info& x) {
  return f(caf::meta::type_name("dsec::snapshot_info"), x.ref, x.digest, x.layers,
           x.size_bytes, x.duration_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, denial_counts& x) {
  return inspect_fields(f, "dsec::denial_counts", x);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sandbox_info& x) {
  return inspect_fields(f, "dsec::sandbox_info", x);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_config& x) {
  return f(caf::meta::type_name("dsec::layer_config"), x.env, x.workdir, x.user,
           x.start);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_info& x) {
  return f(caf::meta::type_name("dsec::layer_info"), x.ref, x.name, x.version, x.kind,
           x.digest, x.size_bytes, x.created_at_ms, x.config);
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
