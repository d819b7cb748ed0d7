// run_blocking: the one way an actor does blocking work. The work runs on the
// node's worker pool; its result comes back to the actor as a continuation
// message and `then` runs inside the actor, on the actor's own thread.
#pragma once

#include <memory>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include "actors/atoms.hpp"
#include "actors/interfaces.hpp"
#include "sys/worker_pool.hpp"

namespace dsec {

/// Sends `f` to run inside `hdl` (from any thread).
template <class Handle, class F>
void run_in(const Handle& hdl, F f) {
  caf::anon_send(hdl, cont_atom::value, continuation{std::move(f)});
}

/// Runs `work()` on `pool`, then `then(result)` inside `self`. If the actor is
/// gone by then, the result is dropped: callers whose results own resources
/// keep their actor alive until every job they started has reported back.
template <class Self, class Work, class Then>
void run_blocking(Self* self, sys::worker_pool& pool, Work work, Then then) {
  auto hdl = caf::actor_cast<caf::actor>(self);
  pool.post([hdl, work = std::move(work), then = std::move(then)]() mutable {
    auto res = std::make_shared<decltype(work())>(work());
    run_in(hdl, [res, then]() mutable { then(*res); });
  });
}

} // namespace dsec
