// What the deterministic actor tests in test/actor/ share: an actor system on
// CAF's test coordinator (nothing runs until the test drives it; timers move
// only when the test advances its clock), and requests whose answer lands in
// a slot, so a test can check that an answer has NOT come yet (a timer still
// running) as well as what it was.
#pragma once

#include <memory>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/caf_error.hpp"
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

} // namespace dsec::test
