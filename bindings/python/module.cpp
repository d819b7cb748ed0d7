// dsec._native: the pybind11 layer over the native client
// (bindings/client/native_client.hpp). It knows Python; the client knows CAF;
// neither knows the other's world.
//
// Every call has two forms:
//   - blocking (`Connection.create(...)`): the GIL is released while waiting,
//     in 100 ms slices so Ctrl-C still works (an interrupted exec is
//     cancelled on the node);
//   - submitted (`Connection.submit(queue, ticket, op, args)`): the result is
//     pushed to a CompletionQueue from the CAF thread (no GIL taken there) and
//     its eventfd wakes the asyncio loop, which drains it on its own thread.
// Results are built as Python objects only under the GIL, in `outcome::make`.
// Node errors become dsec.errors exceptions in one function, raise_error().
//
// After fork, connections work in the child (the client reconnects), but a
// stream or completion queue made before the fork belongs to the parent: its
// results arrive there. In the child such an object raises Unavailable saying
// so (inherited()), and never touches its state, which a parent thread may
// have been changing at the fork.
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/client/native_client.hpp"
#include "core/error_kind.hpp"
#include "core/ttl.hpp"

namespace py = pybind11;
using namespace std::chrono_literals;

namespace dsec::py_native {

using client::connection;
using client::connection_ptr;

// -- errors ---------------------------------------------------------------------

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

/// The exception object for a node error (code name and message attached).
py::object make_exception(const error& err) {
  auto cls = error_class(err.code);
  // A changed step (core/trajectory.hpp step_conflict) has its own subclass.
  if (err.code == errc::conflict && err.message.rfind("step \"", 0) == 0)
    cls = py::module_::import("dsec.errors").attr("StepConflict");
  return cls(err.message, py::str(std::string{to_string(err.code)}),
             py::arg("infra") = is_infra(err));
}

/// Raises `err` as its dsec.errors exception.
[[noreturn]] void raise_error(const error& err) {
  auto exc = make_exception(err);
  PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
  throw py::error_already_set();
}

// -- conversions ------------------------------------------------------------------

py::bytes to_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

py::dict to_py(const sandbox_info& s) {
  py::dict d;
  d["id"] = s.id;
  d["node"] = s.node;
  d["state"] = to_string(s.state);
  d["backend"] = s.backend;
  d["layers"] = s.layers;
  d["labels"] = s.labels;
  d["created_at"] = s.created_at_ms / 1000.0;
  d["expires_at"] = s.expires_at_ms ? py::object(py::float_(s.expires_at_ms / 1000.0)) : py::none();
  d["reason"] = s.reason;
  d["cpu"] = s.cpu;
  d["memory_mb"] = s.memory_mb;
  d["disk_mb"] = s.disk_mb;
  d["cpu_class"] = s.cpu_class;
  {
    using namespace std::chrono;
    auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    auto left = ttl::remaining_ms(s, now);
    d["ttl_remaining_s"] = left < 0 ? py::object(py::none()) : py::object(py::float_(left / 1000.0));
    d["paused_ttl_s"] = s.paused_ttl_s;
    d["paused_expires_at"] = s.paused_expires_at_ms
                               ? py::object(py::float_(s.paused_expires_at_ms / 1000.0))
                               : py::object(py::none());
  }
  py::dict den;
  den["network"] = s.denials.network;
  den["syscall"] = s.denials.syscall;
  den["file"] = s.denials.file;
  den["recent"] = s.denials.recent;
  d["denials"] = den;
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

py::tuple to_py(const exec_result& r) {
  return py::make_tuple(r.exit_code, to_bytes(r.stdout_data), to_bytes(r.stderr_data),
                        r.timed_out, r.duration_ms, r.truncated, r.node_ms, r.replayed);
}

/// (pid, argv, started_at, running, result tuple as for exec_result).
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

/// (done ids, [(id or None, node, exception)]).
py::tuple to_py(const job_result& r) {
  py::list errors;
  for (auto& e : r.errors)
    errors.append(py::make_tuple(e.id.empty() ? py::object(py::none()) : py::object(py::str(e.id)),
                                 e.node, make_exception(error{e.code, e.message})));
  return py::make_tuple(r.done, errors);
}

template <class T>
py::list to_py(const std::vector<T>& xs) {
  py::list out;
  for (auto& x : xs)
    out.append(to_py(x));
  return out;
}

py::object to_py(bool b) { return py::bool_(b); }
py::object to_py(const std::string& s) { return to_bytes(s); }

/// Field `key` of a spec dict, cast to T; InvalidArgument naming the field.
template <class T>
void take(const py::dict& d, const char* key, T& out) {
  if (!d.contains(key) || d[key].is_none())
    return;
  try {
    out = d[key].cast<T>();
  } catch (const py::cast_error&) {
    raise_error(invalid_argument(std::string{"spec: "} + key + " has the wrong type ("
                                 + std::string{py::str(d[key].get_type().attr("__name__"))}
                                 + ")"));
  }
}

sandbox_spec spec_from(const py::dict& d) {
  sandbox_spec s;
  take(d, "backend", s.backend);
  take(d, "layers", s.layers);
  take(d, "cpu", s.cpu);
  take(d, "memory_mb", s.memory_mb);
  take(d, "disk_mb", s.disk_mb);
  take(d, "pids", s.pids);
  take(d, "ttl_s", s.ttl_s);
  take(d, "network_allow", s.network.allow);
  take(d, "protect_readonly", s.protect.readonly);
  take(d, "protect_hidden", s.protect.hidden);
  take(d, "env", s.env);
  take(d, "labels", s.labels);
  take(d, "cpu_class", s.cpu_class);
  take(d, "node", s.node);
  take(d, "request_id", s.request_id);
  take(d, "paused_ttl_s", s.paused_ttl_s);
  return s;
}

/// exec args tuple: (argv, cwd, env, stdin bytes, timeout_s).
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

// -- outcomes -------------------------------------------------------------------

/// A finished call: an error, or a maker of its Python value (run under the GIL).
struct outcome {
  error err;
  std::function<py::object()> make;
};
using outcome_fn = std::function<void(outcome)>;

template <class T>
client::done_fn<T> to_outcome(outcome_fn sink) {
  return [sink = std::move(sink)](expected<T> r) {
    if (!r)
      return sink({r.err(), nullptr});
    auto v = std::make_shared<T>(std::move(*r));
    sink({{}, [v] { return py::object(to_py(*v)); }});
  };
}

/// Starts `op` with Python `args` (converted here, under the GIL).
/// `token` makes an exec cancellable; `chunk` receives a streamed exec's output.
void start(connection& c, const std::string& op, const py::tuple& args, outcome_fn sink,
           uint64_t token = 0, client::chunk_fn chunk = nullptr) {
  auto str = [&](size_t i) { return args[i].cast<std::string>(); };
  if (op == "create")
    return c.create(spec_from(args[0].cast<py::dict>()), to_outcome<sandbox_info>(sink));
  if (op == "info")
    return c.info(str(0), to_outcome<sandbox_info>(sink));
  if (op == "list")
    return c.list(args[0].cast<std::map<std::string, std::string>>(),
                  to_outcome<std::vector<sandbox_info>>(sink));
  if (op == "destroy")
    return c.destroy(str(0), to_outcome<bool>(sink));
  if (op == "exec" && chunk)
    return c.exec_stream(str(0), exec_from(args[1].cast<py::tuple>()), token, std::move(chunk),
                         to_outcome<exec_result>(sink));
  if (op == "exec")
    return c.exec(str(0), exec_from(args[1].cast<py::tuple>()), token,
                  to_outcome<exec_result>(sink));
  if (op == "write_file")
    return c.write_file(str(0), str(1), str(2), to_outcome<bool>(sink));
  if (op == "read_file")
    return c.read_file(str(0), str(1), args[2].cast<uint64_t>(), to_outcome<std::string>(sink));
  if (op == "status")
    return c.status(to_outcome<node_status>(sink));
  if (op == "layers")
    return c.layers(to_outcome<std::vector<layer_info>>(sink));
  if (op == "nodes")
    return c.nodes(to_outcome<std::vector<member_info>>(sink));
  if (op == "pause")
    return c.pause(str(0), to_outcome<sandbox_info>(sink));
  if (op == "resume")
    return c.resume(str(0), to_outcome<sandbox_info>(sink));
  if (op == "job") // (labels, pause)
    return c.job_action(args[0].cast<std::map<std::string, std::string>>(), args[1].cast<bool>(),
                 to_outcome<job_result>(sink));
  if (op == "snapshot")
    return c.snapshot(str(0), str(1), str(2), to_outcome<snapshot_info>(sink));
  if (op == "set_network") {
    network_policy policy;
    policy.allow = args[1].cast<std::vector<std::string>>();
    return c.set_network(str(0), std::move(policy), to_outcome<bool>(sink));
  }
  if (op == "update") { // (id, cpu_class or "", allow-list or None)
    network_policy policy;
    bool set_net = !args[2].is_none();
    if (set_net)
      policy.allow = args[2].cast<std::vector<std::string>>();
    return c.update(str(0), str(1), set_net, std::move(policy), to_outcome<sandbox_info>(sink));
  }
  if (op == "fncall") {
    fncall_request req;
    req.language = str(0);
    req.code = str(1);
    req.stdin_data = str(2);
    req.timeout_s = args[3].cast<double>();
    req.files = args[4].cast<std::map<std::string, std::string>>();
    return c.fncall(std::move(req), to_outcome<exec_result>(sink));
  }
  if (op == "trajectory") // NDJSON text, parsed by the Python layer
    return c.trajectory(str(0), args[1].cast<int64_t>(), to_outcome<std::string>(sink));
  if (op == "replay")
    return c.replay(str(0), args[1].cast<int64_t>(), to_outcome<sandbox_info>(sink));
  if (op == "exec_background")
    return c.exec_background(str(0), exec_from(args[1].cast<py::tuple>()),
                             to_outcome<background_process>(sink));
  if (op == "processes")
    return c.processes(str(0), to_outcome<std::vector<process_info>>(sink));
  if (op == "process")
    return c.process(str(0), args[1].cast<int32_t>(), args[2].cast<int64_t>(),
                     to_outcome<background_process>(sink));
  if (op == "signal_process")
    return c.signal_process(str(0), args[1].cast<int32_t>(), args[2].cast<int32_t>(),
                            args[3].cast<bool>(), to_outcome<bool>(sink));
  throw py::value_error("dsec._native: unknown operation \"" + op + "\"");
}

/// Waits for `ready()` with the GIL released, in slices, so signals are seen.
/// On a pending signal runs `on_interrupt` and raises it.
template <class Ready>
void wait_interruptibly(Ready ready, const std::function<void()>& on_interrupt) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = ready(100ms);
    }
    if (done)
      return;
    if (PyErr_CheckSignals() != 0) {
      if (on_interrupt)
        on_interrupt();
      throw py::error_already_set();
    }
  }
}

py::object value_or_raise(outcome& o) {
  if (o.err)
    raise_error(o.err);
  return o.make();
}

/// The error of `what`, made in a process that has forked since.
[[noreturn]] void raise_inherited(const std::string& what) {
  raise_error(unavailable(what + ": started before this process was forked, so its results go "
                                 "to the parent process; start it again in this process "
                                 "(Client, AsyncClient and Sandbox objects inherited across "
                                 "fork work in the child)"));
}

// -- completion queue (asyncio) ---------------------------------------------------

/// Finished submitted calls and stream chunks, handed to the asyncio loop.
class completion_queue {
 public:
  completion_queue() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0)
      throw std::runtime_error("dsec: eventfd failed");
  }
  // Closing only drops this process's reference; a parent's copy stays intact.
  ~completion_queue() { ::close(fd_); }

  int fd() const { return fd_; }

  /// Made before a fork: the parent's CAF threads push to it, not ours.
  bool inherited() const { return gen_ != client::fork_generation(); }

  /// Any thread; no GIL needed.
  void push(uint64_t ticket, bool final, outcome o) {
    {
      std::lock_guard<std::mutex> lock{mu_};
      items_.push_back({ticket, final, std::move(o)});
    }
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
  }

  /// Under the GIL: [(ticket, final, exception or None, value or None)].
  /// Nothing for an inherited queue: the eventfd is shared with the parent,
  /// and reading it here would swallow the parent's wake-ups.
  py::list drain() {
    if (inherited())
      return py::list{};
    uint64_t count;
    [[maybe_unused]] auto n = ::read(fd_, &count, sizeof count);
    std::deque<item> items;
    {
      std::lock_guard<std::mutex> lock{mu_};
      items.swap(items_);
    }
    py::list out;
    for (auto& it : items) {
      if (it.o.err)
        out.append(py::make_tuple(it.ticket, it.final, make_exception(it.o.err), py::none()));
      else
        out.append(py::make_tuple(it.ticket, it.final, py::none(), it.o.make()));
    }
    return out;
  }

 private:
  struct item {
    uint64_t ticket;
    bool final;
    outcome o;
  };
  int fd_;
  uint64_t gen_ = client::fork_generation();
  std::mutex mu_;
  std::deque<item> items_;
};

using queue_ptr = std::shared_ptr<completion_queue>;

py::object chunk_to_py(const exec_chunk& c) { return py::make_tuple(c.stream, to_bytes(c.data)); }

// -- blocking streams -------------------------------------------------------------

/// Output of one streamed exec, consumed by a blocking Python iterator.
class exec_stream {
 public:
  exec_stream(connection_ptr c, std::string id) : conn_(std::move(c)), id_(std::move(id)) {}

  void set_token(uint64_t t) { token_ = t; }

  void on_chunk(exec_chunk c) {
    std::lock_guard<std::mutex> lock{mu_};
    chunks_.push_back(std::move(c));
    cv_.notify_all();
  }

  void on_done(outcome o) {
    std::lock_guard<std::mutex> lock{mu_};
    final_ = std::move(o);
    ended_ = true;
    cv_.notify_all();
  }

  /// The next (stream, bytes) chunk; StopIteration at the end (the result,
  /// or the error, is then in result()).
  py::object next() {
    if (inherited())
      raise_inherited("exec stream in sandbox " + id_);
    auto ready = [this](std::chrono::milliseconds d) {
      std::unique_lock<std::mutex> lock{mu_};
      return cv_.wait_for(lock, d, [this] { return !chunks_.empty() || ended_; });
    };
    wait_interruptibly(ready, [this] { conn_->cancel(id_, token_); });
    std::lock_guard<std::mutex> lock{mu_};
    if (!chunks_.empty()) {
      auto c = std::move(chunks_.front());
      chunks_.pop_front();
      return chunk_to_py(c);
    }
    throw py::stop_iteration();
  }

  /// The exec result; raises the call's error. Only after next() stopped.
  py::object result() {
    if (inherited())
      raise_inherited("exec stream in sandbox " + id_);
    std::lock_guard<std::mutex> lock{mu_};
    if (!ended_)
      throw py::value_error("dsec: the stream has not ended; iterate it first");
    return value_or_raise(final_);
  }

  /// A no-op in a forked child: the command belongs to the parent.
  void cancel() {
    if (!inherited())
      conn_->cancel(id_, token_);
  }

 private:
  // Its state is written by the CAF threads of the process that started it.
  bool inherited() const { return gen_ != client::fork_generation(); }

  connection_ptr conn_;
  std::string id_;
  uint64_t gen_ = client::fork_generation();
  uint64_t token_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<exec_chunk> chunks_;
  bool ended_ = false;
  outcome final_;
};

// -- the Connection class -----------------------------------------------------------

connection_ptr open(const std::string& addr, double connect_timeout_s, double call_timeout_s) {
  client::options opts;
  opts.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
  opts.call_timeout = std::chrono::milliseconds(static_cast<int64_t>(call_timeout_s * 1000));
  expected<connection_ptr> c = error{};
  {
    py::gil_scoped_release nogil;
    c = connection::open(addr, opts);
  }
  if (!c)
    raise_error(c.err());
  return *c;
}

/// Blocking call: start, wait (GIL released), convert.
py::object call(connection& c, const std::string& op, const py::tuple& args) {
  auto prom = std::make_shared<std::promise<outcome>>();
  auto fut = prom->get_future();
  uint64_t token = op == "exec" ? client::new_token() : 0;
  start(c, op, args, [prom](outcome o) { prom->set_value(std::move(o)); }, token);
  std::function<void()> on_interrupt;
  if (token != 0)
    on_interrupt = [&c, id = args[0].cast<std::string>(), token] { c.cancel(id, token); };
  wait_interruptibly(
    [&fut](std::chrono::milliseconds d) { return fut.wait_for(d) == std::future_status::ready; },
    on_interrupt);
  auto o = fut.get();
  return value_or_raise(o);
}

/// Submitted call: the outcome goes to `q` under `ticket`. Returns the exec
/// token (for cancel) or 0.
uint64_t submit(connection& c, const queue_ptr& q, uint64_t ticket, const std::string& op,
                const py::tuple& args, bool stream) {
  if (q->inherited()) // its eventfd would wake the parent's loop, not ours
    raise_inherited("completion queue of " + op);
  uint64_t token = op == "exec" ? client::new_token() : 0;
  client::chunk_fn chunk;
  if (stream)
    chunk = [q, ticket](exec_chunk ch) {
      auto v = std::make_shared<exec_chunk>(std::move(ch));
      q->push(ticket, false, {{}, [v] { return chunk_to_py(*v); }});
    };
  start(c, op, args, [q, ticket](outcome o) { q->push(ticket, true, std::move(o)); }, token,
        std::move(chunk));
  return token;
}

std::shared_ptr<exec_stream> open_stream(const connection_ptr& c, const std::string& id,
                                         const py::tuple& exec_args) {
  auto s = std::make_shared<exec_stream>(c, id);
  auto token = client::new_token();
  s->set_token(token);
  // The callbacks hold the stream: it outlives the call even if Python drops it.
  start(*c, "exec", py::make_tuple(id, exec_args),
        [s](outcome o) { s->on_done(std::move(o)); }, token,
        [s](exec_chunk ch) { s->on_chunk(std::move(ch)); });
  return s;
}

/// n creates in flight at once; [(exception or None, info dict or None)].
py::list create_many(connection& c, const py::dict& spec, int n) {
  struct gather {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<outcome> outs;
    int left;
  };
  auto g = std::make_shared<gather>();
  g->outs.resize(n);
  g->left = n;
  for (int i = 0; i < n; ++i)
    start(c, "create", py::make_tuple(spec), [g, i](outcome o) {
      std::lock_guard<std::mutex> lock{g->mu};
      g->outs[i] = std::move(o);
      if (--g->left == 0)
        g->cv.notify_all();
    });
  wait_interruptibly(
    [g](std::chrono::milliseconds d) {
      std::unique_lock<std::mutex> lock{g->mu};
      return g->cv.wait_for(lock, d, [&] { return g->left == 0; });
    },
    nullptr);
  py::list out;
  for (auto& o : g->outs)
    out.append(o.err ? py::make_tuple(make_exception(o.err), py::none())
                     : py::make_tuple(py::none(), o.make()));
  return out;
}

} // namespace dsec::py_native

PYBIND11_MODULE(_native, m) {
  using namespace dsec::py_native;
  m.doc() = "dsec native protocol client (internal; use the dsec package)";

  py::class_<completion_queue, queue_ptr>(m, "CompletionQueue")
    .def(py::init<>())
    .def_property_readonly("fd", &completion_queue::fd)
    .def("drain", &completion_queue::drain,
         "[(ticket, final, exception or None, value or None)] of everything finished");

  py::class_<exec_stream, std::shared_ptr<exec_stream>>(m, "ExecStream")
    .def("__iter__", [](py::object self) { return self; })
    .def("__next__", &exec_stream::next)
    .def("result", &exec_stream::result)
    .def("cancel", &exec_stream::cancel);

  py::class_<connection, connection_ptr>(m, "Connection")
    .def(py::init(&open), py::arg("addr"), py::arg("connect_timeout_s") = 10.0,
         py::arg("call_timeout_s") = 300.0)
    .def_property_readonly("address", &connection::address)
    .def("close", &connection::close)
    .def("call", &call, "Blocking call of `op` with `args`")
    .def("submit", &submit, py::arg("queue"), py::arg("ticket"), py::arg("op"), py::arg("args"),
         py::arg("stream") = false)
    .def("stream", &open_stream)
    .def("create_many", &create_many)
    .def("cancel", [](connection& c, const std::string& id, uint64_t token) {
      c.cancel(id, token);
    });

  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    dsec::client::shutdown();
  }, "Stops every connection and the actor system (at interpreter exit).");
}
