// The native client (see native_client.hpp).
//
// Shape: one process-wide actor_system (made on first use, torn down by
// client::shutdown()); per connection, one event-based "client actor" per
// connection *lifetime*. The actor connects through the middleman (never
// blocking), holds the node's front-door handle, issues every call as a CAF
// request and tracks it on its link (actors/peer_links.hpp). When the node goes
// away, the actor fails everything in flight with `unavailable`, marks itself
// dead and quits; the
// next call spawns a fresh actor, which reconnects.
//
// A call is a `pending_call<T>`: it answers exactly once, whoever gets there
// first (the reply, the down handler, or its destructor when the job never
// reached a live actor), so no caller can wait forever.
//
// Calls about one sandbox go through impl::op, which takes the message and
// the wait from the operation's declaration (actors/operations.hpp).
//
// Fork: a child abandons the runtime it inherited and makes its own on its
// next call; inherited connections reconnect through it (fork.hpp).
#include "bindings/client/native_client.hpp"
#include "bindings/client/client_actor.hpp"

#include <atomic>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>
#include <caf/actor_companion.hpp>
#include <caf/io/all.hpp>
#include <caf/scoped_execution_unit.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/wire_types.hpp"
#include "bindings/client/fork.hpp"
#include "core/host_port.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "core/session_inspect.hpp"

namespace dsec::client {

using namespace detail;

// -- connection -----------------------------------------------------------------


namespace {
/// Live connections, so shutdown() can drop their actor handles before the
/// system goes. Requires runtime_mu.
std::unordered_set<connection::impl*> live_connections;
} // namespace

struct connection::impl {
  std::string address;
  std::string host;
  uint16_t port = 0;
  options opts;
  std::mutex mu;
  caf::actor actor;
  std::shared_ptr<link> lk;
  /// fork_generation() of the runtime `actor` and `lk` live in.
  uint64_t gen = fork_generation();
  bool closed = false;

  impl() {
    std::lock_guard<std::mutex> g{runtime_mu};
    live_connections.insert(this);
  }

  ~impl() {
    std::lock_guard<std::mutex> g{runtime_mu};
    live_connections.erase(this);
    forget_inherited();
    actor = nullptr;
  }

  /// In a forked child, abandons the handles into the parent's runtime
  /// (fork.hpp): releasing them would run CAF code of a runtime with no
  /// threads, and `lk`'s mutex may have been held at fork by one of them. The
  /// next call spawns a client actor in this process's runtime, which
  /// reconnects. Requires mu (or sole ownership).
  void forget_inherited() {
    auto now = fork_generation();
    if (gen == now)
      return;
    gen = now;
    fork::abandon(std::move(actor));
    fork::abandon(std::move(lk));
  }

  /// Hands `j` to the live client actor, spawning one (which reconnects) if
  /// needed. Under runtime_mu, so the system cannot go away meanwhile.
  void post(job j) {
    std::lock_guard<std::mutex> g{runtime_mu};
    std::unique_lock<std::mutex> lock{mu};
    if (closed || stopped) {
      lock.unlock();
      return j.call->fail(unavailable("node " + address + ": connection closed by client"));
    }
    forget_inherited();
    if (!actor || is_dead(*lk)) {
      lk = std::make_shared<link>();
      actor = spawn_client(host, port, opts, lk);
      if (!actor) {
        lock.unlock();
        return j.call->fail(resource_exhausted(
          "connect node " + address + ": cannot install the fork hooks (pthread_atfork: "
          "out of memory)"));
      }
    }
    caf::anon_send(actor, call_atom::value, std::move(j));
  }

  /// The live link if it is connected, else null (calls go via the actor).
  std::shared_ptr<link> connected_link() {
    std::lock_guard<std::mutex> g{runtime_mu};
    std::lock_guard<std::mutex> lock{mu};
    forget_inherited();
    if (closed || stopped || !actor || !lk)
      return nullptr;
    return lk;
  }

  /// Sends `msg` on the direct path; false if the link is not up (then the
  /// caller takes the actor path, which connects).
  template <class T>
  bool call_direct(caf::message& msg, std::chrono::milliseconds bound,
                   std::shared_ptr<pending_call<T>>& pc) {
    auto l = connected_link();
    if (!l)
      return false;
    std::unique_lock<std::mutex> lock{l->mu};
    if (l->dead || !l->front || !l->companion)
      return false;
    auto* comp = caf::actor_cast<caf::actor_companion*>(l->companion);
    auto mid = comp->new_request_id(caf::message_priority::normal);
    link::direct_call d;
    d.deadline = bound.count() > 0 ? std::chrono::steady_clock::now() + bound
                                   : std::chrono::steady_clock::time_point::max();
    d.call = pc;
    d.answer = [pc](caf::message& m) {
      if (m.match_elements<T>())
        pc->finish(std::move(m.get_mutable_as<T>(0)));
      else if (m.match_elements<caf::error>())
        pc->finish(from_caf(m.get_as<caf::error>(0)));
      else
        pc->finish(internal_error(pc->what + ": unexpected answer " + caf::to_string(m)));
    };
    l->direct.emplace(mid.request_id().integer_value(), std::move(d));
    auto dest = l->front;
    auto sender = l->companion;
    lock.unlock();
    dest->enqueue(caf::make_mailbox_element(std::move(sender), mid, {}, std::move(msg)), nullptr);
    return true;
  }

  /// Sends `msg` (made by checked<T>) to the front door; `done` gets a T.
  template <class T>
  void call(caf::message msg, caf::duration timeout, std::string what, done_fn<T> done,
            uint64_t stream_token = 0, chunk_fn chunk = nullptr) {
    auto pc = std::make_shared<pending_call<T>>(std::move(done), std::move(what));
    if (!chunk && call_direct<T>(msg, to_ms(timeout), pc))
      return;
    job j;
    j.call = pc;
    j.run = [pc, msg = std::move(msg), timeout, stream_token,
             chunk = std::move(chunk)](client_actor_ptr self) mutable {
      auto& st = self->state;
      auto node = st.address();
      auto ticket = st.links.track(node, [pc](const error& e) { pc->fail(e); });
      bool streamed = chunk != nullptr; // before `chunk` moves into the table
      if (chunk) {
        st.streams.emplace(stream_token, std::move(chunk));
        // The sink is this actor, known only here: slot 3 of both streamed
        // rows (actors/operations.hpp: stream_op and follow_op).
        msg.get_mutable_as<caf::actor>(3) = caf::actor_cast<caf::actor>(self);
      }
      auto settle = [self, node, ticket, stream_token, streamed] {
        if (streamed)
          self->state.streams.erase(stream_token);
        return self->state.links.settle(node, ticket);
      };
      // `msg` was checked against placement_actor when it was made.
      self->request(caf::actor_cast<caf::actor>(st.front), timeout, std::move(msg))
        .then(
          [pc, settle](T& x) {
            if (settle())
              pc->finish(std::move(x));
          },
          [pc, settle](caf::error& err) {
            if (settle())
              pc->finish(from_caf(err));
          });
    };
    post(std::move(j));
  }

  caf::duration op_timeout() const { return caf::duration{opts.call_timeout}; }

  /// A call of operation Op about sandbox `id` (actors/operations.hpp): its
  /// message, checked against the front door, waited for as long as the op's
  /// deadline at this connection's waits (call_timeout, exec_slack).
  template <class Op, class... Ts>
  void op(std::string what, std::string id, done_fn<typename Op::reply> done, Ts... xs) {
    using reply = typename Op::reply;
    auto wait = Op::deadline(ops::waits{opts.call_timeout, opts.exec_slack}, xs...);
    auto bound = wait ? caf::duration{*wait} : caf::infinite;
    call<reply>(checked<reply>(Op::atom::value, std::move(id), std::move(xs)...), bound,
                std::move(what), std::move(done));
  }
};

connection::connection(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

connection::~connection() { close(); }

expected<connection_ptr> connection::open(const std::string& addr, options opts) {
  auto hp = parse_host_port(addr, false);
  if (!hp)
    return invalid_argument("connect: " + hp.err().message);
  auto p = std::make_unique<impl>();
  p->address = addr;
  p->host = hp->first;
  p->port = hp->second;
  p->opts = opts;
  connection_ptr conn{new connection(std::move(p))};
  // A status call proves a dsec node answers there, within the connect bound.
  auto prom = std::make_shared<std::promise<expected<node_status>>>();
  auto fut = prom->get_future();
  conn->status([prom](expected<node_status> r) { prom->set_value(std::move(r)); });
  if (fut.wait_for(opts.connect_timeout + std::chrono::seconds(1)) != std::future_status::ready) {
    conn->close();
    return unavailable("connect " + addr + ": no answer within "
                       + std::to_string(opts.connect_timeout.count()) + " ms");
  }
  auto st = fut.get();
  if (!st)
    return st.err();
  return conn;
}

const std::string& connection::address() const { return impl_->address; }

void connection::close() {
  std::lock_guard<std::mutex> g{runtime_mu};
  std::lock_guard<std::mutex> lock{impl_->mu};
  if (impl_->closed)
    return;
  impl_->closed = true;
  impl_->forget_inherited();
  if (impl_->actor && !stopped)
    caf::anon_send(impl_->actor, close_atom::value);
  impl_->actor = nullptr;
}

void connection::create(sandbox_spec spec, done_fn<sandbox_info> done) {
  auto what = "create on node " + impl_->address;
  impl_->call<sandbox_info>(checked<sandbox_info>(create_atom::value, std::move(spec)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::info(std::string id, done_fn<sandbox_info> done) {
  auto what = "get sandbox " + id;
  impl_->op<ops::info_op>(std::move(what), std::move(id), std::move(done));
}

void connection::list(std::map<std::string, std::string> labels,
                      done_fn<std::vector<sandbox_info>> done) {
  impl_->call<std::vector<sandbox_info>>(checked<std::vector<sandbox_info>>(list_atom::value, std::move(labels)),
                                         impl_->op_timeout(), "list sandboxes", std::move(done));
}

void connection::destroy(std::string id, done_fn<bool> done) {
  auto what = "destroy sandbox " + id;
  impl_->op<ops::destroy_op>(std::move(what), std::move(id), std::move(done));
}

void connection::exec(std::string id, exec_request req, uint64_t token,
                      done_fn<exec_result> done) {
  auto what = "exec in sandbox " + id;
  impl_->op<ops::exec_op>(std::move(what), std::move(id), std::move(done), std::move(req), token);
}

void connection::follow(std::string id, int32_t pid, chunk_fn chunk,
                        done_fn<background_process> done) {
  auto what = "follow process " + std::to_string(pid) + " in sandbox " + id;
  auto token = new_token(); // chunks are routed by token
  // Waited for as long as the command runs (follow_op's deadline); a node
  // that goes away fails it at once.
  impl_->call<background_process>(
    checked<background_process>(follow_atom::value, std::move(id), pid, caf::actor{}, token),
    caf::infinite, std::move(what), std::move(done), token, std::move(chunk));
}

void connection::exec_stream(std::string id, exec_request req, uint64_t token, chunk_fn chunk,
                             done_fn<exec_result> done) {
  auto what = "exec (streamed) in sandbox " + id;
  auto wait = ops::exec_deadline(ops::waits{impl_->opts.call_timeout, impl_->opts.exec_slack}, req);
  auto timeout = wait ? caf::duration{*wait} : caf::infinite;
  if (token == 0)
    token = new_token(); // chunks are routed by token
  // The sink slot is filled by the client actor with itself (it routes the
  // chunks by token).
  impl_->call<exec_result>(
    checked<exec_result>(stream_atom::value, std::move(id), std::move(req), caf::actor{}, token),
    timeout, std::move(what), std::move(done), token, std::move(chunk));
}

void connection::cancel(std::string id, uint64_t token) {
  job j;
  j.call = std::make_shared<pending_call<bool>>([](expected<bool>) {}, "cancel");
  j.run = [id = std::move(id), token, call = j.call](client_actor_ptr self) {
    self->send(self->state.front, cancel_atom::value, id, token);
    static_cast<pending_call<bool>&>(*call).finish(true);
  };
  impl_->post(std::move(j));
}

void connection::write_file(std::string id, std::string path, std::string data,
                            done_fn<bool> done) {
  auto what = "write " + path + " in sandbox " + id;
  impl_->op<ops::wfile_op>(std::move(what), std::move(id), std::move(done), std::move(path),
                           std::move(data));
}

void connection::read_file(std::string id, std::string path, uint64_t max_bytes,
                           done_fn<std::string> done) {
  auto what = "read " + path + " in sandbox " + id;
  impl_->op<ops::rfile_op>(std::move(what), std::move(id), std::move(done), std::move(path),
                           max_bytes);
}

void connection::status(done_fn<node_status> done) {
  impl_->call<node_status>(checked<node_status>(status_atom::value), impl_->op_timeout(),
                           "status of node " + impl_->address, std::move(done));
}

void connection::layers(done_fn<std::vector<layer_info>> done) {
  impl_->call<std::vector<layer_info>>(checked<std::vector<layer_info>>(layers_atom::value),
                                       impl_->op_timeout(), "list layers", std::move(done));
}

void connection::nodes(done_fn<std::vector<member_info>> done) {
  impl_->call<std::vector<member_info>>(checked<std::vector<member_info>>(nodes_atom::value),
                                        impl_->op_timeout(), "list nodes", std::move(done));
}

void connection::pause(std::string id, done_fn<sandbox_info> done) {
  auto what = "pause sandbox " + id;
  impl_->op<ops::pause_op>(std::move(what), std::move(id), std::move(done));
}

void connection::pause_files(std::string id, done_fn<sandbox_info> done) {
  auto what = "pause sandbox " + id + " without memory";
  impl_->op<ops::pause_files_op>(std::move(what), std::move(id), std::move(done));
}

void connection::resume(std::string id, done_fn<sandbox_info> done) {
  auto what = "resume sandbox " + id;
  impl_->op<ops::resume_op>(std::move(what), std::move(id), std::move(done));
}

void connection::snapshot(std::string id, std::string name, std::string version,
                          done_fn<snapshot_info> done) {
  auto what = "snapshot sandbox " + id;
  impl_->op<ops::snapshot_op>(std::move(what), std::move(id), std::move(done), std::move(name),
                              std::move(version));
}

void connection::set_network(std::string id, network_policy policy, done_fn<bool> done) {
  auto what = "set network of sandbox " + id;
  impl_->op<ops::network_op>(std::move(what), std::move(id), std::move(done), std::move(policy));
}

void connection::update(std::string id, std::string cpu_class, bool set_network,
                        network_policy policy, done_fn<sandbox_info> done) {
  auto what = "update sandbox " + id;
  impl_->op<ops::update_op>(std::move(what), std::move(id), std::move(done), std::move(cpu_class),
                            set_network, std::move(policy));
}

void connection::job_action(std::map<std::string, std::string> labels, bool pause,
                            done_fn<job_result> done) {
  auto what = std::string{pause ? "pause" : "resume"} + " job";
  impl_->call<job_result>(checked<job_result>(job_atom::value, std::move(labels), pause),
                          impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::fncall(fncall_request req, done_fn<exec_result> done) {
  // The node kills the call at its timeout; wait that long plus slack.
  auto timeout = caf::duration{exec_wait(req.timeout_s, impl_->opts.exec_slack).value_or(
    impl_->opts.call_timeout)};
  impl_->call<exec_result>(checked<exec_result>(fncall_atom::value, std::move(req)), timeout,
                           "fncall", std::move(done));
}

void connection::trajectory(std::string id, int64_t since, done_fn<std::string> done) {
  auto what = "trajectory of sandbox " + id;
  impl_->call<std::string>(checked<std::string>(traj_atom::value, std::move(id), since),
                           impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::replay(std::string id, int64_t upto, done_fn<sandbox_info> done) {
  auto what = "replay sandbox " + id;
  // A rebuild re-runs every exec of the log: no bound but the connection's.
  impl_->call<sandbox_info>(checked<sandbox_info>(replay_atom::value, std::move(id), upto),
                            caf::infinite, std::move(what), std::move(done));
}

void connection::exec_background(std::string id, exec_request req,
                                 done_fn<background_process> done) {
  auto what = "background exec in sandbox " + id;
  impl_->op<ops::bgexec_op>(std::move(what), std::move(id), std::move(done), std::move(req));
}

void connection::processes(std::string id, done_fn<std::vector<process_info>> done) {
  auto what = "list processes in sandbox " + id;
  impl_->op<ops::procs_op>(std::move(what), std::move(id), std::move(done));
}

void connection::process(std::string id, int32_t pid, int64_t wait_ms,
                         done_fn<background_process> done) {
  auto what = "process " + std::to_string(pid) + " in sandbox " + id;
  impl_->op<ops::proc_op>(std::move(what), std::move(id), std::move(done), pid, wait_ms);
}

void connection::signal_process(std::string id, int32_t pid, int32_t signo, bool group,
                                done_fn<bool> done) {
  auto what = "signal process " + std::to_string(pid) + " in sandbox " + id;
  impl_->op<ops::signal_op>(std::move(what), std::move(id), std::move(done), pid, signo, group);
}

void connection::metrics(std::string id, done_fn<sandbox_metric> done) {
  auto what = "metrics of sandbox " + id;
  impl_->op<ops::sbmetrics_op>(std::move(what), std::move(id), std::move(done));
}

void connection::pty_open(std::string id, exec_request req, int32_t cols, int32_t rows,
                          done_fn<background_process> done) {
  auto what = "open terminal in sandbox " + id;
  impl_->op<ops::pty_open_op>(std::move(what), std::move(id), std::move(done), std::move(req), cols,
                              rows);
}

void connection::pty_write(std::string id, int32_t pid, std::string data, done_fn<bool> done) {
  auto what = "write to terminal " + std::to_string(pid) + " in sandbox " + id;
  impl_->op<ops::pty_write_op>(std::move(what), std::move(id), std::move(done), pid,
                               std::move(data));
}

void connection::pty_resize(std::string id, int32_t pid, int32_t cols, int32_t rows,
                            done_fn<bool> done) {
  auto what = "resize terminal " + std::to_string(pid) + " in sandbox " + id;
  impl_->op<ops::pty_resize_op>(std::move(what), std::move(id), std::move(done), pid, cols, rows);
}

void connection::session_open(std::string id, std::string shell, std::string cwd,
                              std::map<std::string, std::string> env,
                              done_fn<session_info> done) {
  auto what = "open a session in sandbox " + id;
  impl_->op<ops::session_open_op>(std::move(what), std::move(id), std::move(done),
                                  std::move(shell), std::move(cwd), std::move(env));
}

void connection::session_run(std::string id, std::string sid, std::string cmd, double timeout_s,
                             done_fn<exec_result> done) {
  auto what = "run in session " + sid + " of sandbox " + id;
  impl_->op<ops::session_run_op>(std::move(what), std::move(id), std::move(done), std::move(sid),
                                 std::move(cmd), timeout_s);
}

void connection::session_close(std::string id, std::string sid, done_fn<bool> done) {
  auto what = "close session " + sid + " of sandbox " + id;
  impl_->op<ops::session_close_op>(std::move(what), std::move(id), std::move(done),
                                   std::move(sid));
}

void connection::session_list(std::string id, done_fn<std::vector<session_info>> done) {
  auto what = "list sessions of sandbox " + id;
  impl_->op<ops::session_list_op>(std::move(what), std::move(id), std::move(done));
}

void connection::port(std::string id, int32_t port, done_fn<port_route> done) {
  auto what = "port " + std::to_string(port) + " of sandbox " + id;
  impl_->op<ops::port_op>(std::move(what), std::move(id), std::move(done), port);
}

uint64_t new_token() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  // A forked child copies the forking thread's generator: reseed, or parent
  // and child would draw the same tokens (and cancel each other's execs).
  static thread_local uint64_t seeded_in = fork_generation();
  if (seeded_in != fork_generation()) {
    rng.seed(std::random_device{}());
    seeded_in = fork_generation();
  }
  uint64_t t = 0;
  while (t == 0)
    t = rng();
  return t;
}

void shutdown() {
  std::lock_guard<std::mutex> g{runtime_mu};
  stopped = true;
  for (auto* c : live_connections) {
    std::lock_guard<std::mutex> lock{c->mu};
    c->closed = true;
    c->forget_inherited();
    c->actor = nullptr;
  }
  stop_runtime();
}

} // namespace dsec::client

