// The native client's inside (native_client.cpp, client_actor.cpp): the
// calls in flight, the jobs the calling threads hand the client actor, the
// state one connection lifetime shares between them (the direct path), and
// the process-wide actor system. Only these two files include it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/interfaces.hpp"
#include "actors/peer_links.hpp"
#include "bindings/client/native_client.hpp"

namespace dsec::client::detail {


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

} // namespace dsec::client::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::client::detail::job)

namespace dsec::client::detail {


using call_atom = caf::atom_constant<caf::atom("call")>;

/// The message of a call answered with a T: the build fails unless the front
/// door (placement_actor, actors/interfaces.hpp) takes `xs...` and answers T.
template <class T, class... Ts>
caf::message checked(Ts&&... xs) {
  using answer = caf::response_type<
    placement_actor::signatures, caf::detail::implicit_conversions_t<std::decay_t<Ts>>...>;
  static_assert(answer::valid, "the node's front door takes no such message");
  static_assert(std::is_same<typename answer::type, caf::detail::type_list<T>>::value,
                "the node's front door answers this message with another type");
  return caf::make_message(std::forward<Ts>(xs)...);
}
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
  /// The node's front door (its placement actor), once connected.
  caf::actor front;
  caf::strong_actor_ptr companion;
  /// Direct calls in flight, by request id.
  std::unordered_map<uint64_t, direct_call> direct;
};

struct client_state {
  static inline const char* name = "dsec-client";
  std::string host;
  uint16_t port = 0;
  options opts;
  /// The node's front door, once connected.
  placement_actor front;
  /// The one link (actors/peer_links.hpp): jobs wait on it while it connects,
  /// and calls in flight on it fail at once when the node goes away.
  peer_links<placement_actor> links;
  /// Exec token -> where its streamed chunks go.
  std::unordered_map<uint64_t, chunk_fn> streams;
  /// Shared with the connection (and its calling threads).
  std::shared_ptr<link> lk;

  std::string where() const { return "node " + address(); }
  /// "host:port", the node's key in `links`.
  std::string address() const { return host + ":" + std::to_string(port); }
};

/// Guards the runtime and every connection's actor handle. Lock order:
/// runtime_mu, then a connection's mutex.
extern std::mutex runtime_mu;
/// Set by shutdown(): no system will be made again. Requires runtime_mu.
extern bool stopped;

/// True once this lifetime takes no more calls.
bool is_dead(const link& lk);

/// A CAF duration in milliseconds; 0 for infinite.
std::chrono::milliseconds to_ms(const caf::duration& d);

/// Spawns a client actor in the process-wide system (made on first use);
/// null if the fork hooks cannot be installed. Requires runtime_mu.
caf::actor spawn_client(const std::string& host, uint16_t port, const options& opts,
                        std::shared_ptr<link> lk);

/// Stops every client actor and tears the system down. Requires runtime_mu.
void stop_runtime();

} // namespace dsec::client::detail
