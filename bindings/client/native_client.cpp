// The native client (see native_client.hpp).
//
// Shape: one process-wide actor_system (made on first use, torn down by
// client::shutdown()); per connection, one event-based "client actor" per
// connection *lifetime*. The actor connects through the middleman (never
// blocking), holds the node's lifecycle handle, issues every call as a CAF
// request and tracks it in `pending`. When the node goes away, the actor fails
// everything pending with `unavailable`, marks itself dead and quits; the
// next call spawns a fresh actor, which reconnects.
//
// A call is a `pending_call<T>`: it answers exactly once, whoever gets there
// first (the reply, the down handler, or its destructor when the job never
// reached a live actor), so no caller can wait forever.
//
// Fork: a child abandons the runtime it inherited and makes its own on its
// next call; inherited connections reconnect through it (fork.hpp).
#include "bindings/client/native_client.hpp"

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
#include "actors/wire_types.hpp"
#include "bindings/client/fork.hpp"
#include "core/host_port.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"

namespace dsec::client {

namespace {

/// A call in flight, type-erased for the pending table.
struct call_base {
  virtual ~call_base() = default;
  virtual void fail(error err) = 0;
};

template <class T>
struct pending_call final : call_base {
  done_fn<T> done;
  std::string what;

  pending_call(done_fn<T> d, std::string w) : done(std::move(d)), what(std::move(w)) {}

  void finish(expected<T> r) {
    if (!done)
      return;
    auto d = std::move(done);
    done = nullptr;
    d(std::move(r));
  }

  void fail(error err) override { finish(std::move(err)); }

  ~pending_call() override {
    finish(unavailable(what + ": the connection to the node closed before an answer"));
  }
};

struct client_state;
using client_actor_ptr = caf::stateful_actor<client_state>*;

/// Work for the client actor, sent from any thread. In-process only.
struct job {
  std::function<void(client_actor_ptr)> run;
  std::shared_ptr<call_base> call; // failed if the connection is gone
};

} // namespace
} // namespace dsec::client

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::client::job)

namespace dsec::client {

namespace {

using call_atom = caf::atom_constant<caf::atom("call")>;
using close_atom = caf::atom_constant<caf::atom("close")>;

/// What one connection lifetime shares between its client actor and the
/// calling threads. The direct path: a plain call goes from the calling thread
/// straight to the node's proxy, with a companion actor as the sender, and
/// the answer is handed over inline on the thread that receives it (the
/// middleman's): two thread wake-ups fewer per call than via the actor.
/// Streams stay on the actor path, where chunks and answer keep their order.
struct link {
  struct direct_call {
    std::chrono::steady_clock::time_point deadline;
    /// Turns the answer into the call's value; runs on the receiving thread.
    std::function<void(caf::message&)> answer;
    std::shared_ptr<call_base> call;
  };

  mutable std::mutex mu;
  /// Set once this lifetime takes no more calls.
  bool dead = false;
  /// The node's lifecycle (placement) actor, once connected.
  caf::actor lifecycle;
  caf::strong_actor_ptr companion;
  /// Direct calls in flight, by request id.
  std::unordered_map<uint64_t, direct_call> direct;
};

struct client_state {
  static inline const char* name = "dsec-client";
  std::string host;
  uint16_t port = 0;
  options opts;
  caf::actor lifecycle;
  bool connecting = false;
  /// Jobs that arrived before the connection was up.
  std::vector<job> waiting;
  uint64_t next_ticket = 0;
  std::unordered_map<uint64_t, std::shared_ptr<call_base>> pending;
  /// Exec token -> where its streamed chunks go.
  std::unordered_map<uint64_t, chunk_fn> streams;
  /// Shared with the connection (and its calling threads).
  std::shared_ptr<link> lk;

  std::string where() const { return "node " + host + ":" + std::to_string(port); }
};

/// Fails every call of this connection lifetime and quits.
void fail_all_and_quit(client_actor_ptr self, const error& err) {
  auto& st = self->state;
  std::unordered_map<uint64_t, link::direct_call> direct;
  caf::strong_actor_ptr companion;
  {
    std::lock_guard<std::mutex> lock{st.lk->mu};
    st.lk->dead = true;
    direct.swap(st.lk->direct);
    companion = std::move(st.lk->companion);
  }
  for (auto& [id, d] : direct)
    d.call->fail(err);
  if (companion) {
    auto* comp = caf::actor_cast<caf::actor_companion*>(companion);
    comp->on_enqueue([](caf::mailbox_element_ptr) {});
    caf::scoped_execution_unit unit{&self->home_system()};
    comp->cleanup(caf::error{}, &unit);
  }
  auto pending = std::move(st.pending);
  auto waiting = std::move(st.waiting);
  st.pending.clear();
  st.waiting.clear();
  st.streams.clear();
  for (auto& [ticket, call] : pending)
    call->fail(err);
  for (auto& j : waiting)
    j.call->fail(err);
  self->quit();
}

bool is_dead(const link& lk) {
  std::lock_guard<std::mutex> lock{lk.mu};
  return lk.dead;
}

void run_job(client_actor_ptr self, job& j) {
  if (is_dead(*self->state.lk))
    return j.call->fail(unavailable(self->state.where() + ": connection closed"));
  j.run(self);
}

/// Fails direct calls past their deadline; runs every second while connected.
void expire_direct(client_actor_ptr self) {
  auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<call_base>> late;
  {
    std::lock_guard<std::mutex> lock{self->state.lk->mu};
    auto& direct = self->state.lk->direct;
    for (auto it = direct.begin(); it != direct.end();)
      if (it->second.deadline <= now) {
        late.push_back(std::move(it->second.call));
        it = direct.erase(it);
      } else {
        ++it;
      }
  }
  for (auto& c : late)
    c->fail({errc::timeout, self->state.where() + ": no answer in time"});
}

/// A CAF duration in milliseconds; 0 for infinite.
std::chrono::milliseconds to_ms(const caf::duration& d) {
  using namespace std::chrono;
  auto n = static_cast<int64_t>(d.count);
  switch (d.unit) {
    case caf::time_unit::minutes: return duration_cast<milliseconds>(minutes(n));
    case caf::time_unit::seconds: return duration_cast<milliseconds>(seconds(n));
    case caf::time_unit::milliseconds: return milliseconds(n);
    case caf::time_unit::microseconds: return duration_cast<milliseconds>(microseconds(n));
    case caf::time_unit::nanoseconds: return duration_cast<milliseconds>(nanoseconds(n));
    default: return milliseconds(0);
  }
}

/// The companion that receives direct answers, inline on the receiving thread.
caf::strong_actor_ptr make_companion(caf::actor_system& sys, std::weak_ptr<link> weak) {
  auto companion = caf::actor_cast<caf::strong_actor_ptr>(sys.spawn<caf::actor_companion>());
  auto* comp = caf::actor_cast<caf::actor_companion*>(companion);
  comp->on_enqueue([weak](caf::mailbox_element_ptr ptr) {
    auto lk = weak.lock();
    if (!ptr || !lk || !ptr->mid.is_response())
      return;
    link::direct_call d;
    {
      std::lock_guard<std::mutex> lock{lk->mu};
      auto it = lk->direct.find(ptr->mid.request_id().integer_value());
      if (it == lk->direct.end())
        return; // timed out or failed already
      d = std::move(it->second);
      lk->direct.erase(it);
    }
    auto msg = ptr->move_content_to_message();
    d.answer(msg);
  });
  return companion;
}

void connect(client_actor_ptr self) {
  auto& st = self->state;
  st.connecting = true;
  auto mm = self->home_system().middleman().actor_handle();
  self->request(mm, caf::duration{st.opts.connect_timeout}, caf::connect_atom::value, st.host,
                st.port)
    .then(
      [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        auto& st = self->state;
        st.connecting = false;
        if (!ptr)
          return fail_all_and_quit(self, unavailable("connect " + st.where()
                                                     + ": no dsec node is published there"));
        st.lifecycle = caf::actor_cast<caf::actor>(std::move(ptr));
        self->monitor(st.lifecycle);
        {
          std::lock_guard<std::mutex> lock{st.lk->mu};
          st.lk->lifecycle = st.lifecycle;
          st.lk->companion = make_companion(self->home_system(), st.lk);
        }
        self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom::value);
        auto waiting = std::move(st.waiting);
        st.waiting.clear();
        for (auto& j : waiting)
          run_job(self, j);
      },
      [self](caf::error& err) {
        auto& st = self->state;
        fail_all_and_quit(self, unavailable("connect " + st.where() + ": "
                                            + (err == caf::sec::request_timeout
                                                 ? std::string{"timed out"}
                                                 : self->home_system().render(err))));
      });
}

caf::behavior client_actor(client_actor_ptr self, std::string host, uint16_t port, options opts,
                           std::shared_ptr<link> lk) {
  auto& st = self->state;
  st.host = std::move(host);
  st.port = port;
  st.opts = opts;
  st.lk = std::move(lk);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.lifecycle.address())
      return;
    fail_all_and_quit(self, unavailable(self->state.where() + " went away ("
                                        + self->home_system().render(dm.reason) + ")"));
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    fail_all_and_quit(self, unavailable(self->state.where() + ": client shut down"));
  });
  return {
    [self](call_atom, job& j) {
      auto& st = self->state;
      if (st.lifecycle)
        return run_job(self, j);
      st.waiting.push_back(std::move(j));
      if (!st.connecting)
        connect(self);
    },
    // Streamed output of an exec (the remote form of stream_atom).
    [self](stream_atom, uint64_t token, exec_chunk& c) {
      auto it = self->state.streams.find(token);
      if (it != self->state.streams.end())
        it->second(std::move(c));
    },
    [self](close_atom) {
      fail_all_and_quit(self, unavailable(self->state.where() + ": connection closed by client"));
    },
    [self](caf::tick_atom) {
      expire_direct(self);
      self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom::value);
    },
  };
}

// -- the process-wide actor system --------------------------------------------

struct runtime {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  /// Every client actor spawned (weak), so shutdown() can stop the live ones:
  /// ~actor_system waits for all actors.
  std::vector<caf::actor_addr> clients;

  runtime() {
    configure_native_protocol(cfg);
    // Two workers: callbacks are short; more threads only contend on 2 cores.
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

/// Guards the runtime and every connection's actor handle. Lock order:
/// runtime_mu, then a connection's mutex.
std::mutex runtime_mu;
runtime* the_runtime = nullptr;
/// Set by shutdown(): no system will be made again.
bool stopped = false;

void lock_runtime() { runtime_mu.lock(); }
void unlock_runtime() { runtime_mu.unlock(); }

/// In a forked child: the inherited runtime has no threads, so it is
/// abandoned, not deleted (~actor_system would wait for them forever); the
/// next spawn_client makes a new one. Connections drop their handles into the
/// old one lazily (impl::forget_inherited).
void reset_runtime_in_child() { the_runtime = nullptr; }

/// Spawns a client actor in the process-wide system (made on first use);
/// null if the fork hooks cannot be installed. Requires runtime_mu.
caf::actor spawn_client(const std::string& host, uint16_t port, const options& opts,
                        std::shared_ptr<link> lk) {
  if (!the_runtime) {
    if (!fork::install({lock_runtime, unlock_runtime, reset_runtime_in_child}))
      return nullptr;
    the_runtime = new runtime;
  }
  auto& clients = the_runtime->clients;
  if (clients.size() >= 64) // forget the ones that are gone
    clients.erase(std::remove_if(clients.begin(), clients.end(),
                                 [](auto& a) { return !caf::actor_cast<caf::actor>(a); }),
                  clients.end());
  auto a = the_runtime->sys->spawn(client_actor, host, port, opts, std::move(lk));
  clients.push_back(a.address());
  return a;
}

} // namespace

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

  /// Sends `msg` to the lifecycle actor and answers `done` with a T.
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
    if (l->dead || !l->lifecycle || !l->companion)
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
    auto dest = l->lifecycle;
    auto sender = l->companion;
    lock.unlock();
    dest->enqueue(caf::make_mailbox_element(std::move(sender), mid, {}, std::move(msg)), nullptr);
    return true;
  }

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
      auto ticket = ++st.next_ticket;
      st.pending.emplace(ticket, pc);
      if (chunk) {
        st.streams.emplace(stream_token, std::move(chunk));
        // The sink is this actor: built here, where `self` is known.
        msg = caf::make_message(stream_atom::value, msg.get_as<std::string>(0),
                                msg.get_as<exec_request>(1), caf::actor_cast<caf::actor>(self),
                                stream_token);
      }
      auto settle = [self, ticket, stream_token, streamed = chunk == nullptr ? false : true] {
        if (streamed)
          self->state.streams.erase(stream_token);
        return self->state.pending.erase(ticket) > 0;
      };
      self->request(st.lifecycle, timeout, std::move(msg))
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
  impl_->call<sandbox_info>(caf::make_message(create_atom::value, std::move(spec)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::info(std::string id, done_fn<sandbox_info> done) {
  auto what = "get sandbox " + id;
  impl_->call<sandbox_info>(caf::make_message(info_atom::value, std::move(id)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::list(std::map<std::string, std::string> labels,
                      done_fn<std::vector<sandbox_info>> done) {
  impl_->call<std::vector<sandbox_info>>(caf::make_message(list_atom::value, std::move(labels)),
                                         impl_->op_timeout(), "list sandboxes", std::move(done));
}

void connection::destroy(std::string id, done_fn<bool> done) {
  auto what = "destroy sandbox " + id;
  impl_->call<bool>(caf::make_message(destroy_atom::value, std::move(id)), impl_->op_timeout(),
                    std::move(what), std::move(done));
}

namespace {

caf::duration exec_timeout(const exec_request& req, const options& opts) {
  auto wait = exec_wait(req.timeout_s, opts.exec_slack);
  return wait ? caf::duration{*wait} : caf::infinite;
}

} // namespace

void connection::exec(std::string id, exec_request req, uint64_t token,
                      done_fn<exec_result> done) {
  auto what = "exec in sandbox " + id;
  auto timeout = exec_timeout(req, impl_->opts);
  impl_->call<exec_result>(
    caf::make_message(exec_atom::value, std::move(id), std::move(req), token), timeout,
    std::move(what), std::move(done));
}

void connection::exec_stream(std::string id, exec_request req, uint64_t token, chunk_fn chunk,
                             done_fn<exec_result> done) {
  auto what = "exec (streamed) in sandbox " + id;
  auto timeout = exec_timeout(req, impl_->opts);
  if (token == 0)
    token = new_token(); // chunks are routed by token
  // Placeholder message; the client actor rebuilds it with itself as the sink.
  impl_->call<exec_result>(caf::make_message(std::move(id), std::move(req)), timeout,
                           std::move(what), std::move(done), token, std::move(chunk));
}

void connection::cancel(std::string id, uint64_t token) {
  job j;
  j.call = std::make_shared<pending_call<bool>>([](expected<bool>) {}, "cancel");
  j.run = [id = std::move(id), token, call = j.call](client_actor_ptr self) {
    self->send(self->state.lifecycle, cancel_atom::value, id, token);
    static_cast<pending_call<bool>&>(*call).finish(true);
  };
  impl_->post(std::move(j));
}

void connection::write_file(std::string id, std::string path, std::string data,
                            done_fn<bool> done) {
  auto what = "write " + path + " in sandbox " + id;
  impl_->call<bool>(
    caf::make_message(wfile_atom::value, std::move(id), std::move(path), std::move(data)),
    impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::read_file(std::string id, std::string path, uint64_t max_bytes,
                           done_fn<std::string> done) {
  auto what = "read " + path + " in sandbox " + id;
  impl_->call<std::string>(
    caf::make_message(rfile_atom::value, std::move(id), std::move(path), max_bytes),
    impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::status(done_fn<node_status> done) {
  impl_->call<node_status>(caf::make_message(status_atom::value), impl_->op_timeout(),
                           "status of node " + impl_->address, std::move(done));
}

void connection::layers(done_fn<std::vector<layer_info>> done) {
  impl_->call<std::vector<layer_info>>(caf::make_message(layers_atom::value),
                                       impl_->op_timeout(), "list layers", std::move(done));
}

void connection::nodes(done_fn<std::vector<member_info>> done) {
  impl_->call<std::vector<member_info>>(caf::make_message(nodes_atom::value),
                                        impl_->op_timeout(), "list nodes", std::move(done));
}

void connection::pause(std::string id, done_fn<sandbox_info> done) {
  auto what = "pause sandbox " + id;
  impl_->call<sandbox_info>(caf::make_message(pause_atom::value, std::move(id)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::resume(std::string id, done_fn<sandbox_info> done) {
  auto what = "resume sandbox " + id;
  impl_->call<sandbox_info>(caf::make_message(resume_atom::value, std::move(id)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::snapshot(std::string id, std::string name, std::string version,
                          done_fn<snapshot_info> done) {
  auto what = "snapshot sandbox " + id;
  impl_->call<snapshot_info>(
    caf::make_message(snapshot_atom::value, std::move(id), std::move(name), std::move(version)),
    impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::set_network(std::string id, network_policy policy, done_fn<bool> done) {
  auto what = "set network of sandbox " + id;
  impl_->call<bool>(caf::make_message(network_atom::value, std::move(id), std::move(policy)),
                    impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::update(std::string id, std::string cpu_class, bool set_network,
                        network_policy policy, done_fn<sandbox_info> done) {
  auto what = "update sandbox " + id;
  impl_->call<sandbox_info>(caf::make_message(update_atom::value, std::move(id),
                                              std::move(cpu_class), set_network,
                                              std::move(policy)),
                            impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::job_action(std::map<std::string, std::string> labels, bool pause,
                            done_fn<job_result> done) {
  auto what = std::string{pause ? "pause" : "resume"} + " job";
  impl_->call<job_result>(caf::make_message(job_atom::value, std::move(labels), pause),
                          impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::fncall(fncall_request req, done_fn<exec_result> done) {
  // The node kills the call at its timeout; wait that long plus slack.
  auto timeout = caf::duration{exec_wait(req.timeout_s, exec_slack_inner).value_or(
    exec_slack_inner)};
  impl_->call<exec_result>(caf::make_message(fncall_atom::value, std::move(req)), timeout,
                           "fncall", std::move(done));
}

void connection::trajectory(std::string id, int64_t since, done_fn<std::string> done) {
  auto what = "trajectory of sandbox " + id;
  impl_->call<std::string>(caf::make_message(traj_atom::value, std::move(id), since),
                           impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::replay(std::string id, int64_t upto, done_fn<sandbox_info> done) {
  auto what = "replay sandbox " + id;
  // A rebuild re-runs every exec of the log: no bound but the connection's.
  impl_->call<sandbox_info>(caf::make_message(replay_atom::value, std::move(id), upto),
                            caf::infinite, std::move(what), std::move(done));
}

void connection::exec_background(std::string id, exec_request req,
                                 done_fn<background_process> done) {
  auto what = "background exec in sandbox " + id;
  impl_->call<background_process>(
    caf::make_message(bgexec_atom::value, std::move(id), std::move(req)), impl_->op_timeout(),
    std::move(what), std::move(done));
}

void connection::processes(std::string id, done_fn<std::vector<process_info>> done) {
  auto what = "list processes in sandbox " + id;
  impl_->call<std::vector<process_info>>(caf::make_message(procs_atom::value, std::move(id)),
                                         impl_->op_timeout(), std::move(what), std::move(done));
}

void connection::process(std::string id, int32_t pid, int64_t wait_ms,
                         done_fn<background_process> done) {
  auto what = "process " + std::to_string(pid) + " in sandbox " + id;
  // A wait is answered after up to wait_ms: the call waits that long too.
  auto bound = caf::duration{impl_->opts.call_timeout + std::chrono::milliseconds(wait_ms)};
  impl_->call<background_process>(caf::make_message(proc_atom::value, std::move(id), pid, wait_ms),
                                  bound, std::move(what), std::move(done));
}

void connection::signal_process(std::string id, int32_t pid, int32_t signo, bool group,
                                done_fn<bool> done) {
  auto what = "signal process " + std::to_string(pid) + " in sandbox " + id;
  impl_->call<bool>(caf::make_message(signal_atom::value, std::move(id), pid, signo, group),
                    impl_->op_timeout(), std::move(what), std::move(done));
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
  if (!the_runtime)
    return;
  for (auto& addr : the_runtime->clients)
    if (auto a = caf::actor_cast<caf::actor>(addr))
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  delete the_runtime;
  the_runtime = nullptr;
}

} // namespace dsec::client
