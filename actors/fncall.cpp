// The fncall actor (see fncall.hpp).
#include "actors/fncall.hpp"

#include <cstdlib>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "backends/fncall/fncall_pool.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

namespace fc = backends::fncall;

struct fncall_state {
  static inline const char* name = "fncall";
  std::shared_ptr<fc::pool> pool;
};

using fncall_actor_ptr = fncall_actor::stateful_pointer<fncall_state>;

size_t env_size(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    return dflt;
  char* end = nullptr;
  auto n = std::strtoull(v, &end, 10);
  return end && *end == 0 ? static_cast<size_t>(n) : dflt;
}

fc::pool_config make_config(const node_context_ptr& ctx) {
  fc::pool_config cfg;
  cfg.node_id = ctx->config.node_id;
  cfg.sandboxes_dir = ctx->config.state_dir + "/sandboxes";
  if (const char* layer = std::getenv("DSEC_FNCALL_LAYER"); layer && *layer)
    cfg.layers = {layer};
  cfg.prewarm = env_size("DSEC_FNCALL_PREWARM", 0) != 0;
  cfg.min_workers = env_size("DSEC_FNCALL_MIN_WORKERS", cfg.min_workers);
  cfg.max_workers = std::max(cfg.min_workers,
                             env_size("DSEC_FNCALL_MAX_WORKERS", cfg.max_workers));
  cfg.idle_shrink = std::chrono::milliseconds(
    env_size("DSEC_FNCALL_IDLE_MS", static_cast<size_t>(cfg.idle_shrink.count())));
  auto layers = ctx->layers;
  cfg.acquire = [layers](const std::vector<std::string>& refs) -> expected<fc::mounted_layers> {
    auto held = layers->acquire(refs);
    if (!held)
      return held.err();
    return fc::mounted_layers{held->dirs, held->digests};
  };
  cfg.release = [layers](const std::vector<std::string>& digests) { layers->release(digests); };
  return cfg;
}

fncall_actor::behavior_type fncall_behavior(fncall_actor_ptr self, node_context_ptr ctx) {
  self->state.pool = fc::start_pool(ctx->container, make_config(ctx));
  // Runs when the actor quits (node shutdown): the warm sandboxes go before
  // the node unmounts its layers.
  self->attach_functor([pool = self->state.pool](const caf::error&) { pool->shutdown(); });
  // The supervisor's stop: the warm sandboxes go before this actor quits, so
  // its down message (which the supervisor waits for) means they are gone.
  self->set_exit_handler([self](caf::exit_msg& em) {
    self->state.pool->shutdown();
    self->quit(std::move(em.reason));
  });
  return {
    [self](fncall_atom, fncall_request& req) -> caf::result<exec_result> {
      auto rp = self->make_response_promise<exec_result>();
      auto hdl = caf::actor_cast<caf::actor>(self);
      self->state.pool->submit(std::move(req), [hdl, rp](expected<exec_result> r) mutable {
        run_in(hdl, [rp, r = std::move(r)]() mutable {
          if (r)
            rp.deliver(std::move(*r));
          else
            rp.deliver(to_caf(r.err()));
        });
      });
      return rp;
    },
    // INTERNAL: pool completions, run inside the actor.
    [](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace

fncall_actor spawn_fncall(caf::local_actor* parent, node_context_ptr ctx) {
  return parent->spawn<caf::detached + caf::monitored>(fncall_behavior, std::move(ctx));
}

} // namespace dsec
