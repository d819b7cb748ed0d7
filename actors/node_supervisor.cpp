// Node supervisor implementation.
#include "actors/node_supervisor.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/gateway.hpp"
#include "actors/gossip_actor.hpp"
#include "actors/placement.hpp"
#include "actors/lifecycle.hpp"
#include "actors/reclaim.hpp"

namespace dsec {

namespace {

/// Destroying thousands of sandboxes at ~500/s fits well inside this; past it
/// the node stops anyway and the next start on the state dir reaps the rest.
constexpr auto shutdown_timeout = std::chrono::seconds(120);

void stop_children(supervisor_actor_ptr self, caf::error reason) {
  auto& st = self->state;
  for (auto* child : {&st.gateway, &st.gossip, &st.placement, &st.reclaim, &st.lifecycle})
    if (*child)
      self->send_exit(*child, caf::exit_reason::user_shutdown);
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
  self->request(st.gossip, std::chrono::seconds(5), leave_atom::value)
    .then([self](bool) { destroy_sandboxes(self); },
          [self](caf::error&) { destroy_sandboxes(self); });
}

void destroy_sandboxes(supervisor_actor_ptr self) {
  auto& st = self->state;
  self->request(st.lifecycle, shutdown_timeout, shutdown_atom::value)
    .then([self](bool) { stop_children(self, caf::exit_reason::normal); },
          [self](caf::error& err) {
            caf::aout(self) << "dsec node " << self->state.ctx->config.node_id
                            << ": shutdown: " << self->system().render(err) << std::endl;
            stop_children(self, std::move(err));
          });
}

} // namespace

caf::behavior node_supervisor(supervisor_actor_ptr self, node_context_ptr ctx) {
  auto& st = self->state;
  st.ctx = ctx;
  st.lifecycle = self->spawn<caf::monitored>(lifecycle_actor, ctx);
  st.reclaim = self->spawn<caf::monitored>(reclaim_actor, ctx, st.lifecycle,
                                          reclaim_options_from(ctx->config));
  self->send(st.lifecycle, reclaim_atom::value, st.reclaim);
  st.placement = self->spawn<caf::monitored>(placement_actor, ctx, st.lifecycle);
  if (ctx->gossip_net)
    st.gossip = self->spawn<caf::monitored>(gossip_actor, ctx, st.lifecycle, st.placement,
                                            ctx->gossip_net, ctx->config.join);
  st.gateway = self->spawn<caf::monitored>(gateway_actor, ctx, st.placement);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.stopping)
      return;
    auto who = dm.source == st.lifecycle.address()   ? "lifecycle"
               : dm.source == st.reclaim.address()   ? "reclaim"
               : dm.source == st.placement.address() ? "placement"
               : dm.source == st.gossip.address()    ? "gossip"
                                                     : "gateway";
    caf::aout(self) << "dsec node " << st.ctx->config.node_id << ": " << who
                    << " actor died: " << self->system().render(dm.reason)
                    << "; stopping the node" << std::endl;
    st.stopping = true;
    stop_children(self, dm.reason ? dm.reason : caf::make_error(caf::sec::runtime_error));
  });
  return {
    [self](caf::get_atom) {
      return caf::make_message(self->state.placement, self->state.gateway);
    },
    [self](shutdown_atom) { begin_shutdown(self); },
  };
}

} // namespace dsec
