// The client actor and the process-wide actor system of the native client
// (see native_client.cpp for the shape, client_actor.hpp for the types).
#include "bindings/client/client_actor.hpp"

#include <algorithm>
#include <set>

#include <caf/actor_companion.hpp>
#include <caf/io/all.hpp>
#include <caf/scoped_execution_unit.hpp>

#include "actors/caf_error.hpp"
#include "actors/wire_types.hpp"
#include "bindings/client/fork.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"

namespace dsec::client::detail {

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
  st.streams.clear();
  st.links.drop(st.address(), err); // the jobs waiting and the calls in flight
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

/// Runs `j` once the node is connected; the first connection sets up the
/// direct path and the expiry tick. A node that cannot be reached fails
/// every job of this lifetime.
void run_connected(client_actor_ptr self, job j) {
  auto& st = self->state;
  auto on_ready = [self, j](const placement_actor& front, const error& err) mutable {
    auto& st = self->state;
    if (!front) // peer_links says why, as `unavailable`
      return fail_all_and_quit(self, err);
    if (!st.front) {
      st.front = front;
      {
        std::lock_guard<std::mutex> lock{st.lk->mu};
        st.lk->front = caf::actor_cast<caf::actor>(st.front);
        st.lk->companion = make_companion(self->home_system(), st.lk);
      }
      self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom::value);
    }
    run_job(self, j);
  };
  st.links.with(self, st.address(), st.host, st.port, st.opts.connect_timeout,
                std::move(on_ready));
}

caf::behavior client_actor(client_actor_ptr self, std::string host, uint16_t port, options opts,
                           std::shared_ptr<link> lk) {
  auto& st = self->state;
  st.host = std::move(host);
  st.port = port;
  st.opts = opts;
  st.lk = std::move(lk);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.front.address())
      return;
    // The calls in flight fail first, with the reason; then the rest.
    self->state.links.on_down(dm.source, self->home_system().render(dm.reason));
    fail_all_and_quit(self, unavailable(self->state.where() + " went away ("
                                        + self->home_system().render(dm.reason) + ")"));
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    fail_all_and_quit(self, unavailable(self->state.where() + ": client shut down"));
  });
  return {
    [self](call_atom, job& j) { run_connected(self, std::move(j)); },
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

runtime* the_runtime = nullptr;

std::mutex runtime_mu;
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

void stop_runtime() {
  if (!the_runtime)
    return;
  for (auto& addr : the_runtime->clients)
    if (auto a = caf::actor_cast<caf::actor>(addr))
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  delete the_runtime;
  the_runtime = nullptr;
}

} // namespace dsec::client::detail
