// dsec._native: the pybind11 layer over the native client
// (bindings/client/native_client.hpp). It knows Python; the client knows CAF;
// neither knows the other's world. Two translation units, split by
// mechanism: convert.cpp turns node errors into dsec.errors exceptions and
// values into Python objects and back (native.hpp); this file starts the
// calls, waits for them and defines the module's classes. Two, not more:
// each file that includes pybind11 costs ~9 s of the 2-core build on its own.
//
// Every call has two forms:
//   - blocking (`Connection.call(...)`): the GIL is released while waiting,
//     in 100 ms slices so Ctrl-C still works (an interrupted exec is
//     cancelled on the node);
//   - submitted (`Connection.submit(queue, ticket, op, args)`): the result is
//     pushed to a CompletionQueue from the CAF thread (no GIL taken there) and
//     its eventfd wakes the asyncio loop, which drains it on its own thread.
// Results are built as Python objects only under the GIL, in `outcome::make`.
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
#include <future>
#include <mutex>

#include <unordered_map>

#include "actors/operations.hpp"
#include "bindings/python/native.hpp"

using namespace std::chrono_literals;

namespace dsec::py_native {

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

/// Starts one operation with Python `args` (converted under the GIL).
/// `token` makes an exec cancellable; `chunk` receives a streamed exec's output.
using starter = void (*)(connection& c, const py::tuple& args, outcome_fn sink, uint64_t token,
                         client::chunk_fn chunk);

std::string str(const py::tuple& a, size_t i) { return a[i].cast<std::string>(); }
std::map<std::string, std::string> labels_of(const py::handle& h) {
  return h.cast<std::map<std::string, std::string>>();
}

/// The operations the Python layer calls, by name: a sandbox operation's
/// name is its declaration's (actors/operations.hpp), args (id, ...).
const std::unordered_map<std::string, starter>& starters() {
  using args = const py::tuple&;
  using chunk_fn = client::chunk_fn;
  static const std::unordered_map<std::string, starter> table = {
    {"create", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.create(spec_from(a[0].cast<py::dict>()), to_outcome<sandbox_info>(s));
     }},
    {"list", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.list(labels_of(a[0]), to_outcome<std::vector<sandbox_info>>(s));
     }},
    {"status", [](connection& c, args, outcome_fn s, uint64_t, chunk_fn) {
       c.status(to_outcome<node_status>(s));
     }},
    {"layers", [](connection& c, args, outcome_fn s, uint64_t, chunk_fn) {
       c.layers(to_outcome<std::vector<layer_info>>(s));
     }},
    {"nodes", [](connection& c, args, outcome_fn s, uint64_t, chunk_fn) {
       c.nodes(to_outcome<std::vector<member_info>>(s));
     }},
    {"job", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) { // (labels, pause)
       c.job_action(labels_of(a[0]), a[1].cast<bool>(), to_outcome<job_result>(s));
     }},
    {"fncall", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       fncall_request req;
       req.language = str(a, 0);
       req.code = str(a, 1);
       req.stdin_data = str(a, 2);
       req.timeout_s = a[3].cast<double>();
       req.files = a[4].cast<std::map<std::string, std::string>>();
       c.fncall(std::move(req), to_outcome<exec_result>(s));
     }},
    {"trajectory", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) { // NDJSON text
       c.trajectory(str(a, 0), a[1].cast<int64_t>(), to_outcome<std::string>(s));
     }},
    {"replay", [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.replay(str(a, 0), a[1].cast<int64_t>(), to_outcome<sandbox_info>(s));
     }},
    // -- operations on one sandbox (actors/operations.hpp) --
    {ops::info_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.info(str(a, 0), to_outcome<sandbox_info>(s));
     }},
    {ops::destroy_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.destroy(str(a, 0), to_outcome<bool>(s));
     }},
    {ops::exec_op::name, [](connection& c, args a, outcome_fn s, uint64_t token, chunk_fn chunk) {
       auto req = exec_from(a[1].cast<py::tuple>());
       if (chunk) // streamed (ops::stream_op)
         return c.exec_stream(str(a, 0), std::move(req), token, std::move(chunk),
                              to_outcome<exec_result>(s));
       c.exec(str(a, 0), std::move(req), token, to_outcome<exec_result>(s));
     }},
    {ops::wfile_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.write_file(str(a, 0), str(a, 1), str(a, 2), to_outcome<bool>(s));
     }},
    {ops::rfile_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.read_file(str(a, 0), str(a, 1), a[2].cast<uint64_t>(), to_outcome<std::string>(s));
     }},
    {ops::pause_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.pause(str(a, 0), to_outcome<sandbox_info>(s));
     }},
    {ops::pause_files_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.pause_files(str(a, 0), to_outcome<sandbox_info>(s));
     }},
    {ops::resume_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.resume(str(a, 0), to_outcome<sandbox_info>(s));
     }},
    {ops::snapshot_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.snapshot(str(a, 0), str(a, 1), str(a, 2), to_outcome<snapshot_info>(s));
     }},
    {ops::network_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       network_policy policy; // (id, allow-list, deny-list)
       policy.allow = a[1].cast<std::vector<std::string>>();
       policy.deny = a[2].cast<std::vector<std::string>>();
       c.set_network(str(a, 0), std::move(policy), to_outcome<bool>(s));
     }},
    // (id, cpu_class or "", allow-list or None, deny-list)
    {ops::update_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       network_policy policy;
       bool set_net = !a[2].is_none();
       if (set_net) {
         policy.allow = a[2].cast<std::vector<std::string>>();
         policy.deny = a[3].cast<std::vector<std::string>>();
       }
       c.update(str(a, 0), str(a, 1), set_net, std::move(policy), to_outcome<sandbox_info>(s));
     }},
    {ops::bgexec_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.exec_background(str(a, 0), exec_from(a[1].cast<py::tuple>()),
                         to_outcome<background_process>(s));
     }},
    {ops::procs_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.processes(str(a, 0), to_outcome<std::vector<process_info>>(s));
     }},
    {ops::proc_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.process(str(a, 0), a[1].cast<int32_t>(), a[2].cast<int64_t>(),
                 to_outcome<background_process>(s));
     }},
    {ops::signal_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.signal_process(str(a, 0), a[1].cast<int32_t>(), a[2].cast<int32_t>(),
                        a[3].cast<bool>(), to_outcome<bool>(s));
     }},
    // Streamed like exec: the subscription marker (an empty chunk of
    // stream 0, actors/chunk_relay.hpp) stays here.
    {ops::follow_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn chunk) {
       c.follow(str(a, 0), a[1].cast<int32_t>(),
                [chunk](exec_chunk ch) {
                  if (ch.stream != 0 && chunk)
                    chunk(std::move(ch));
                },
                to_outcome<background_process>(s));
     }},
    {ops::sbmetrics_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.metrics(str(a, 0), to_outcome<sandbox_metric>(s));
     }},
    // -- terminals (issue 26 part 1): (id, exec args or None, cols, rows)
    {ops::pty_open_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       exec_request req;
       if (!a[1].is_none())
         req = exec_from(a[1].cast<py::tuple>());
       c.pty_open(str(a, 0), std::move(req), a[2].cast<int32_t>(), a[3].cast<int32_t>(),
                  to_outcome<background_process>(s));
     }},
    {ops::pty_write_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.pty_write(str(a, 0), a[1].cast<int32_t>(), str(a, 2), to_outcome<bool>(s));
     }},
    {ops::pty_resize_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.pty_resize(str(a, 0), a[1].cast<int32_t>(), a[2].cast<int32_t>(), a[3].cast<int32_t>(),
                    to_outcome<bool>(s));
     }},
    // -- shell sessions (issue 26 part 2): (id, shell, cwd, env), (id, sid,
    // cmd, timeout_s), (id, sid), (id).
    {ops::session_open_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.session_open(str(a, 0), str(a, 1), str(a, 2), labels_of(a[3]),
                      to_outcome<session_info>(s));
     }},
    {ops::session_run_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.session_run(str(a, 0), str(a, 1), a[2].cast<std::string>(), a[3].cast<double>(),
                     to_outcome<exec_result>(s));
     }},
    {ops::session_close_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.session_close(str(a, 0), str(a, 1), to_outcome<bool>(s));
     }},
    {ops::session_list_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.session_list(str(a, 0), to_outcome<std::vector<session_info>>(s));
     }},
    // -- ports (issue 26 part 3): (id, port)
    {ops::port_op::name, [](connection& c, args a, outcome_fn s, uint64_t, chunk_fn) {
       c.port(str(a, 0), a[1].cast<int32_t>(), to_outcome<port_route>(s));
     }},
  };
  return table;
}

void start(connection& c, const std::string& op, const py::tuple& args, outcome_fn sink,
           uint64_t token = 0, client::chunk_fn chunk = nullptr) {
  auto& table = starters();
  auto it = table.find(op);
  if (it == table.end())
    throw py::value_error("dsec._native: unknown operation \"" + op + "\"");
  it->second(c, args, std::move(sink), token, std::move(chunk));
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

/// A background process's output as the node pushes it (ops::follow_op);
/// the stream's result is the process at its end, without output.
std::shared_ptr<exec_stream> open_follow(const connection_ptr& c, const std::string& id,
                                         int32_t pid) {
  auto s = std::make_shared<exec_stream>(c, id);
  start(*c, ops::follow_op::name, py::make_tuple(id, pid),
        [s](outcome o) { s->on_done(std::move(o)); }, 0,
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
    .def("follow", &open_follow)
    .def("create_many", &create_many)
    .def("cancel", [](connection& c, const std::string& id, uint64_t token) {
      c.cancel(id, token);
    });

  // The field lists of core/spec_fields.hpp as Python sees them: dsec/_spec.py
  // checks create()'s keywords by SPEC_FIELDS; test/e2e/test_spec_fields.py
  // holds dsec/types.py and __init__.pyi to both.
  m.attr("SPEC_FIELDS") = spec_keywords();
  m.attr("SANDBOX_INFO_FIELDS") = sandbox_info_keys();

  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    dsec::client::shutdown();
  }, "Stops every connection and the actor system (at interpreter exit).");
}
