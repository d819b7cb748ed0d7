// What the deterministic actor tests in test/actor/ share: an actor system on
// CAF's test coordinator (nothing runs until the test drives it; timers move
// only when the test advances its clock), requests whose answer lands in a
// slot, so a test can check that an answer has NOT come yet (a timer still
// running) as well as what it was, and an in-process peer directory (the
// peer connector of actors/peer_links.hpp), so several nodes' actors talk
// in one test process as they would over TCP.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "actors/wire_types.hpp"
#include "core/error.hpp"

namespace dsec::test {

/// An actor system on the test coordinator, with dsec's wire types. Test
/// fixtures derive from it.
struct coordinated_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;

  coordinated_system() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    add_wire_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }
};

/// Empty until the answer (or its error, as a dsec::error) arrives.
template <class T>
using reply_slot = std::shared_ptr<std::optional<expected<T>>>;

/// Sends `xs` to `dest` from a helper actor with no timeout; nothing runs
/// until the test drives the test coordinator.
/// `dest` may be typed: the request and its answer type are checked.
template <class T, class Handle, class... Ts>
reply_slot<T> send_only(caf::actor_system& sys, Handle dest, Ts... xs) {
  auto out = std::make_shared<std::optional<expected<T>>>();
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(dest, caf::infinite, xs...)
      .then([=](T& x) { out->emplace(std::move(x)); },
            [=](caf::error& e) { out->emplace(from_caf(e)); });
  });
  return out;
}

/// Sends `xs` to `dest` from a helper actor that waits at most `timeout`, as
/// a real caller does (its bare timeout lands in the slot as errc::timeout).
template <class T, class Handle, class... Ts>
reply_slot<T> send_within(caf::actor_system& sys, caf::duration timeout, Handle dest, Ts... xs) {
  auto out = std::make_shared<std::optional<expected<T>>>();
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(dest, timeout, xs...)
      .then([=](T& x) { out->emplace(std::move(x)); },
            [=](caf::error& e) { out->emplace(from_caf(e)); });
  });
  return out;
}

/// What an in-process peer publishes at an address: its actor and the
/// interface it announces (as caf::actor_system::message_types gives it).
struct published {
  caf::strong_actor_ptr actor;
  std::set<std::string> interface;
};

/// The in-process peers, by "host:port". Tests add and remove entries while
/// the directory runs (a removed one refuses like a closed port).
using peer_map = std::map<std::string, published>;

/// A peer connector (interfaces.hpp) over `peers`: answers a connect with
/// this process's node, the actor and its interface, or fails as a closed
/// port would.
inline peer_connector::behavior_type peer_directory(peer_connector::pointer self,
                                                    std::shared_ptr<peer_map> peers) {
  return {
    [self, peers](caf::connect_atom, std::string& host, uint16_t port)
      -> caf::result<caf::node_id, caf::strong_actor_ptr, std::set<std::string>> {
      auto it = peers->find(host + ":" + std::to_string(port));
      if (it == peers->end())
        return caf::make_error(caf::sec::cannot_connect_to_node);
      return {self->node(), it->second.actor, it->second.interface};
    },
  };
}

/// Publishes `h` at `address` in `peers`, with the interface of its type.
template <class Handle>
void publish(caf::actor_system& sys, peer_map& peers, const std::string& address,
             const Handle& h) {
  peers[address] = published{caf::actor_cast<caf::strong_actor_ptr>(h), sys.message_types(h)};
}

} // namespace dsec::test
