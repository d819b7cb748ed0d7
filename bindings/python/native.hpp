// Internal to dsec._native (bindings/python/module.cpp, which describes the
// layer): what convert.cpp gives the module, node errors as dsec.errors
// exceptions (raise_error, the one place they are converted) and values
// between C++ and Python. Both files include this header, so the pybind11
// type casters (stl.h) are the same in each.
#pragma once

#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/client/native_client.hpp"

namespace dsec::py_native {

namespace py = pybind11;

using client::connection;
using client::connection_ptr;

// -- errors -----------------------------------------------------------------------

/// The exception object for a node error (code name and message attached).
py::object make_exception(const error& err);

/// Raises `err` as its dsec.errors exception.
[[noreturn]] void raise_error(const error& err);

/// The error of `what`, made in a process that has forked since.
[[noreturn]] void raise_inherited(const std::string& what);

// -- values -----------------------------------------------------------------------

py::bytes to_bytes(const std::string& s);
py::dict to_py(const sandbox_info& s);
py::dict to_py(const snapshot_info& s);
/// {timestamp_ms, cpu_count, cpu_used_pct, mem_used_bytes, mem_total_bytes}.
py::dict to_py(const sandbox_metric& m);
/// {node, rest, traffic_token, backend} (ports, issue 26 part 3).
py::dict to_py(const port_route& r);
py::tuple to_py(const exec_result& r);
/// (pid, argv, started_at, running, result tuple as for exec_result).
py::tuple to_py(const background_process& p);
py::dict to_py(const process_info& p);
py::dict to_py(const node_status& s);
py::dict to_py(const layer_info& l);
py::dict to_py(const member_info& m);
py::dict to_py(const session_info& s); // shell sessions (issue 26 part 2)
/// (done ids, [(id or None, node, exception)]).
py::tuple to_py(const job_result& r);
py::object to_py(bool b);
py::object to_py(const std::string& s);

template <class T>
py::list to_py(const std::vector<T>& xs) {
  py::list out;
  for (auto& x : xs)
    out.append(to_py(x));
  return out;
}

/// (stream, bytes) of a streamed exec's output.
py::object chunk_to_py(const exec_chunk& c);

/// A spec dict (the keywords of dsec.Client.create) as a spec;
/// InvalidArgument naming a field of the wrong type.
sandbox_spec spec_from(const py::dict& d);

/// exec args tuple: (argv, cwd, env, stdin bytes, timeout_s[, step]).
exec_request exec_from(const py::tuple& a);

/// {keyword: "str" | "int" | "float" | "str_list" | "str_map"} of a spec
/// dict, from the field list (core/spec_fields.hpp): dsec/_spec.py checks
/// create()'s keywords by it.
py::dict spec_keywords();

/// The keys of a sandbox info dict (what dsec.SandboxInfo must take).
py::list sandbox_info_keys();

} // namespace dsec::py_native
