// The Python edge's conversions (native.hpp): node errors into dsec.errors
// exceptions, in one function (raise_error), and values between C++ and
// Python, for the calls in module.cpp. The spec and sandbox info dicts are derived from their field list
// (core/spec_fields.hpp); the other values are small tuples and dicts whose
// shape dsec/types.py reads.
#include "bindings/python/native.hpp"

#include "core/clock.hpp"
#include "core/error_kind.hpp"
#include "core/spec_fields.hpp"
#include "core/ttl.hpp"

namespace dsec::py_native {

namespace {

/// The dsec.errors class for a code.
py::object error_class(errc code) {
  auto mod = py::module_::import("dsec.errors");
  switch (code) {
    case errc::invalid_argument: return mod.attr("InvalidArgument");
    case errc::too_large: return mod.attr("TooLarge");
    case errc::not_found: return mod.attr("NotFound");
    case errc::conflict: return mod.attr("Conflict");
    case errc::resource_exhausted: return mod.attr("ResourceExhausted");
    case errc::unavailable: return mod.attr("Unavailable");
    case errc::timeout: return mod.attr("Timeout");
    default: return mod.attr("Error");
  }
}

} // namespace

py::object make_exception(const error& err) {
  auto cls = error_class(err.code);
  // A changed step (core/trajectory.hpp step_conflict) has its own subclass.
  if (err.code == errc::conflict && err.message.rfind("step \"", 0) == 0)
    cls = py::module_::import("dsec.errors").attr("StepConflict");
  return cls(err.message, py::str(std::string{to_string(err.code)}),
             py::arg("infra") = is_infra(err));
}

[[noreturn]] void raise_error(const error& err) {
  auto exc = make_exception(err);
  PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void raise_inherited(const std::string& what) {
  raise_error(unavailable(what + ": started before this process was forked, so its results go "
                                 "to the parent process; start it again in this process "
                                 "(Client, AsyncClient and Sandbox objects inherited across "
                                 "fork work in the child)"));
}

// -- values -----------------------------------------------------------------------

py::bytes to_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

py::dict to_py(const sandbox_info& s) {
  py::dict d;
  write_shown(d, s, audience::python, py::none());
  // The special fields (core/spec_fields.hpp says why).
  d["state"] = to_string(s.state);
  d["reason"] = s.reason;
  auto left = ttl::remaining_ms(s, now_ms());
  d["ttl_remaining_s"] = left < 0 ? py::object(py::none()) : py::object(py::float_(left / 1000.0));
  return d;
}

py::dict to_py(const snapshot_info& s) {
  py::dict d;
  d["ref"] = s.ref;
  d["digest"] = s.digest;
  d["layers"] = s.layers;
  d["size_bytes"] = s.size_bytes;
  d["duration_ms"] = s.duration_ms;
  return d;
}

py::dict to_py(const port_route& r) {
  py::dict d;
  d["node"] = r.node;
  d["rest"] = r.rest;
  d["traffic_token"] = r.traffic_token;
  d["backend"] = r.backend;
  return d;
}

py::dict to_py(const sandbox_metric& m) {
  py::dict d;
  d["timestamp_ms"] = m.timestamp_ms;
  d["cpu_count"] = m.cpu_count;
  d["cpu_used_pct"] = m.cpu_used_pct;
  d["mem_used_bytes"] = m.mem_used;
  d["mem_total_bytes"] = m.mem_total;
  return d;
}

py::tuple to_py(const exec_result& r) {
  return py::make_tuple(r.exit_code, to_bytes(r.stdout_data), to_bytes(r.stderr_data),
                        r.timed_out, r.duration_ms, r.truncated, r.node_ms, r.replayed);
}

py::tuple to_py(const background_process& p) {
  return py::make_tuple(p.pid, p.argv, p.started_at_ms / 1000.0, p.running, to_py(p.result));
}

py::dict to_py(const process_info& p) {
  py::dict d;
  d["pid"] = p.pid;
  d["ppid"] = p.ppid;
  d["argv"] = p.argv;
  d["name"] = p.name;
  d["state"] = p.state;
  d["started_at"] = p.started_at_ms / 1000.0;
  d["background"] = p.background;
  return d;
}

py::dict to_py(const node_status& s) {
  py::dict d;
  d["id"] = s.node_id;
  d["version"] = s.version;
  d["sandboxes"] = s.sandboxes;
  d["creating"] = s.creating;
  d["uptime_ms"] = s.uptime_ms;
  d["creates_total"] = s.creates_total;
  d["create_failures_total"] = s.create_failures_total;
  d["destroys_total"] = s.destroys_total;
  d["execs_total"] = s.execs_total;
  return d;
}

py::dict to_py(const layer_info& l) {
  py::dict d;
  d["ref"] = l.ref;
  d["name"] = l.name;
  d["version"] = l.version;
  d["kind"] = l.kind;
  d["digest"] = l.digest;
  d["size_bytes"] = l.size_bytes;
  d["created_at"] = l.created_at_ms / 1000.0;
  return d;
}

py::dict to_py(const session_info& s) {
  py::dict d;
  d["id"] = s.id;
  d["shell"] = s.shell;
  d["alive"] = s.alive;
  d["runs"] = s.runs;
  d["created_at"] = s.created_at_ms / 1000.0;
  d["reason"] = s.reason;
  return d;
}

py::dict to_py(const member_info& m) {
  py::dict load;
  load["free_memory_mb"] = m.free_memory_mb;
  load["cpu_load"] = m.cpu_load;
  load["sandboxes"] = m.sandboxes;
  load["creating"] = m.creating;
  load["accepting"] = m.accepting;
  load["layers"] = m.layers;
  py::dict d;
  d["id"] = m.id;
  d["address"] = m.address;
  d["state"] = m.state;
  d["incarnation"] = m.incarnation;
  d["load"] = load;
  return d;
}

py::tuple to_py(const job_result& r) {
  py::list errors;
  for (auto& e : r.errors)
    errors.append(py::make_tuple(e.id.empty() ? py::object(py::none()) : py::object(py::str(e.id)),
                                 e.node, make_exception(error{e.code, e.message})));
  return py::make_tuple(r.done, errors);
}

py::object to_py(bool b) { return py::bool_(b); }
py::object to_py(const std::string& s) { return to_bytes(s); }

py::object chunk_to_py(const exec_chunk& c) { return py::make_tuple(c.stream, to_bytes(c.data)); }

// -- specs ------------------------------------------------------------------------

namespace {

/// Calls `f(keyword, member)` for each field of a spec, its policies
/// flattened to `<policy>_<field>` keywords (network_allow, protect_hidden).
template <class T, class F>
void for_each_keyword(T& x, const std::string& prefix, F&& f) {
  for_each_field<T>([&](const auto& fd) {
    auto& v = x.*(fd.member);
    if constexpr (has_field_list_v<typename std::decay_t<decltype(fd)>::type>)
      for_each_keyword(v, prefix + fd.name + "_", f);
    else
      f(prefix + fd.name, v);
  });
}

const char* kind(const std::string&) { return "str"; }
const char* kind(int64_t) { return "int"; }
const char* kind(double) { return "float"; }
const char* kind(bool) { return "bool"; }
const char* kind(const std::vector<std::string>&) { return "str_list"; }
const char* kind(const std::map<std::string, std::string>&) { return "str_map"; }

/// Field `key` of a spec dict, cast to T; InvalidArgument naming the field.
template <class T>
void take(const py::dict& d, const std::string& key, T& out) {
  if (!d.contains(key) || d[key.c_str()].is_none())
    return;
  try {
    out = d[key.c_str()].cast<T>();
  } catch (const py::cast_error&) {
    raise_error(invalid_argument("spec: " + key + " has the wrong type ("
                                 + std::string{py::str(d[key.c_str()].get_type().attr("__name__"))}
                                 + ")"));
  }
}

} // namespace

sandbox_spec spec_from(const py::dict& d) {
  sandbox_spec s;
  for_each_keyword(s, "", [&](const std::string& key, auto& v) { take(d, key, v); });
  return s;
}

py::dict spec_keywords() {
  sandbox_spec s;
  py::dict out;
  for_each_keyword(s, "", [&](const std::string& key, auto& v) { out[py::str(key)] = kind(v); });
  return out;
}

py::list sandbox_info_keys() {
  py::list out;
  for (auto item : to_py(sandbox_info{}))
    out.append(item.first);
  return out;
}

exec_request exec_from(const py::tuple& a) {
  exec_request r;
  try {
    r.argv = a[0].cast<std::vector<std::string>>();
    r.cwd = a[1].cast<std::string>();
    r.env = a[2].cast<std::map<std::string, std::string>>();
    r.stdin_data = a[3].cast<std::string>();
    r.timeout_s = a[4].cast<double>();
    if (a.size() > 5) // the step key (fast-forward), "" = none
      r.step = a[5].cast<std::string>();
  } catch (const py::cast_error&) {
    raise_error(invalid_argument("exec: argv must be a list of str, cwd a str, env a dict of "
                                 "str, stdin bytes and timeout_s a number"));
  }
  return r;
}

} // namespace dsec::py_native
