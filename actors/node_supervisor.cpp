// Node supervisor implementation.
#include "actors/node_supervisor.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/fncall.hpp"
#include "actors/image_fetch.hpp"
#include "actors/gateway.hpp"
#include "actors/gossip_actor.hpp"
#include "actors/placement.hpp"
#include "actors/lifecycle.hpp"
#include "actors/reclaim.hpp"
#include "core/clock.hpp"

namespace dsec {

namespace {

/// Destroying thousands of sandboxes at ~500/s fits well inside this; past it
/// the node stops anyway and the next start on the state dir reaps the rest.
constexpr auto shutdown_timeout = shutdown_wait;

void stop_children(supervisor_actor_ptr self, caf::error reason) {
  auto& st = self->state;
  auto stop = [self](const auto& child) {
    if (child)
      self->send_exit(child, caf::exit_reason::user_shutdown);
  };
  stop(st.gateway);
  stop(st.gossip);
  stop(st.placement);
  stop(st.fetch);
  stop(st.fncall);
  stop(st.reclaim);
  stop(st.lifecycle);
  self->quit(std::move(reason));
}

void destroy_sandboxes(supervisor_actor_ptr self);

void begin_shutdown(supervisor_actor_ptr self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  st.stopping = true;
  caf::aout(self) << "dsec node " << st.ctx->config.node_id
                  << ": stopping, destroying sandboxes" << std::endl;
  if (!st.gossip)
    return destroy_sandboxes(self);
  // Leave first: peers stop placing here while the sandboxes go.
  self->request(st.gossip, local_wait, leave_atom::value)
    .then([self](bool) { destroy_sandboxes(self); },
          [self](caf::error&) { destroy_sandboxes(self); });
}

/// Stops the fncall pool and waits for its down message (its warm sandboxes
/// are gone by then), then stops the rest: the node unmounts its layers once
/// the supervisor is gone.
void stop_fncall_then_children(supervisor_actor_ptr self, caf::error reason) {
  auto& st = self->state;
  if (!st.fncall)
    return stop_children(self, std::move(reason));
  st.final_reason = std::move(reason);
  st.waiting_for_fncall = true;
  self->send_exit(st.fncall, caf::exit_reason::user_shutdown);
}

void destroy_sandboxes(supervisor_actor_ptr self) {
  auto& st = self->state;
  self->request(st.lifecycle, shutdown_timeout, shutdown_atom::value)
    .then([self](bool) { stop_fncall_then_children(self, caf::exit_reason::normal); },
          [self](caf::error& err) {
            caf::aout(self) << "dsec node " << self->state.ctx->config.node_id
                            << ": shutdown: " << self->system().render(err) << std::endl;
            stop_fncall_then_children(self, std::move(err));
          });
}

const char* child_name(const supervisor_state& st, const caf::actor_addr& who) {
  if (who == st.lifecycle.address())
    return "lifecycle";
  if (who == st.reclaim.address())
    return "reclaim";
  if (who == st.fncall.address())
    return "fncall";
  if (who == st.fetch.address())
    return "image_fetch";
  if (who == st.placement.address())
    return "placement";
  if (who == st.gossip.address())
    return "gossip";
  return "gateway";
}

} // namespace

supervisor_actor::behavior_type node_supervisor(supervisor_actor_ptr self, node_context_ptr ctx) {
  auto& st = self->state;
  st.ctx = ctx;
  st.lifecycle = self->spawn<caf::monitored>(lifecycle_behavior, ctx);
  st.reclaim = self->spawn<caf::monitored>(reclaim_behavior, ctx, st.lifecycle,
                                          reclaim_options_from(ctx->config));
  self->send(st.lifecycle, reclaim_atom::value, st.reclaim);
  // FnCall's warm pool starts warming now, before the doors open.
  if (ctx->container)
    st.fncall = spawn_fncall(self, ctx);
  st.fetch = spawn_image_fetch(self, ctx);
  st.placement = self->spawn<caf::monitored>(placement_behavior, ctx, st.lifecycle, st.fetch,
                                            st.fncall);
  self->send(st.fetch, nodes_atom::value, st.placement);
  if (ctx->gossip_net)
    st.gossip = self->spawn<caf::monitored>(gossip_behavior, ctx, st.lifecycle, st.placement,
                                            ctx->gossip_net, ctx->config.join);
  st.gateway = self->spawn<caf::monitored>(gateway_behavior, ctx, st.placement);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.waiting_for_fncall && dm.source == st.fncall.address()) {
      st.waiting_for_fncall = false;
      st.fncall = nullptr;
      return stop_children(self, std::move(st.final_reason));
    }
    if (st.stopping)
      return;
    // Without a layer store the image-fetch actor serves nothing and ends.
    if (dm.source == st.fetch.address() && !dm.reason)
      return;
    caf::aout(self) << "dsec node " << st.ctx->config.node_id << ": "
                    << child_name(st, dm.source)
                    << " actor died: " << self->system().render(dm.reason)
                    << "; stopping the node" << std::endl;
    st.stopping = true;
    if (dm.source == st.fncall.address())
      st.fncall = nullptr;
    stop_fncall_then_children(self, dm.reason ? dm.reason
                                              : caf::make_error(caf::sec::runtime_error));
  });
  return {
    [self](caf::get_atom) -> caf::result<placement_actor, gateway_actor, image_fetch_actor> {
      auto& st = self->state;
      return {st.placement, st.gateway, st.fetch};
    },
    [self](shutdown_atom) { begin_shutdown(self); },
  };
}

} // namespace dsec
