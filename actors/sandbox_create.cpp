// Creating a sandbox (see sandbox_ops.hpp: start_sandbox): the image and
// layers resolved and mounted, the backend's create, the record a restarted
// node adopts it from, and the layers' start command, all on the worker pool;
// then the actor holds the sandbox and arms its TTL.
#include <chrono>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/sandbox_image.hpp"
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_record.hpp"
#include "actors/sandbox_start.hpp"
#include "actors/sandbox_trajectory.hpp"
#include "actors/sandbox_ttl.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/layer_config.hpp"

namespace dsec {

backends::create_params backend_params(const node_context& ctx, const std::string& id,
                                       const sandbox_spec& spec, const held_layers& held) {
  backends::create_params p;
  p.id = id;
  p.spec = spec;
  // The layers' env under the spec's (core/layer_config.hpp): the backend
  // keeps it as the sandbox's environment, across node restarts too.
  p.spec.env = overlay_env(held.config.env, spec.env);
  p.dir = ctx.sandbox_dir(id);
  p.lower_dirs = held.dirs;
  return p;
}

namespace {

/// What the create job hands back to the actor.
struct provisioned {
  std::shared_ptr<backends::sandbox> sb;
  std::vector<std::string> digests;
  /// The layers mounted, bottom first: the image's layer (if the spec names
  /// an image), then the spec's.
  std::vector<std::string> layers;
  int64_t created_at_ms = 0;
  /// The layers' exec defaults (their env is already in the backend's).
  layer_config defaults;
  error err;
};

int64_t expiry(int64_t created_at_ms, int64_t ttl_s) {
  return ttl_s > 0 ? created_at_ms + ttl_s * 1000 : 0;
}

/// Blocking: resolve the image and the layers, mount them, let the backend
/// build the sandbox. The record keeps the spec with the image's layer first,
/// so a restarted node re-takes exactly the mounts it has.
provisioned provision(const node_context& ctx, const std::string& id, sandbox_spec spec,
                      std::chrono::steady_clock::time_point image_deadline) {
  provisioned out;
  if (auto st = resolve_image(ctx, spec, image_deadline); !st) {
    out.err = st.err();
    return out;
  }
  out.layers = spec.layers;
  auto held = ctx.layers->acquire(spec.layers);
  if (!held) {
    out.err = held.err();
    return out;
  }
  auto p = backend_params(ctx, id, spec, *held);
  auto* backend = ctx.backend_for(spec.backend);
  if (!backend) {
    ctx.layers->release(held->digests);
    out.err = invalid_argument("create: backend \"" + spec.backend + "\" is not available");
    return out;
  }
  auto sb = backend->create(p);
  if (!sb) {
    ctx.layers->release(held->digests);
    out.err = sb.err();
    return out;
  }
  // Without its record the sandbox would not survive a node restart (the
  // next node reaps it): a create that cannot keep one fails.
  out.created_at_ms = now_ms();
  if (auto st = keep_new_record(ctx, id, spec, out.created_at_ms, held->digests,
                                held->config.workdir, held->config.user); !st) {
    (void)(*sb)->destroy();
    ctx.layers->release(held->digests);
    out.err = st.err();
    return out;
  }
  out.sb = std::move(*sb);
  out.digests = std::move(held->digests);
  out.defaults = std::move(held->config);
  return out;
}

} // namespace

void start_sandbox(sandbox_actor_ptr self, caf::response_promise rp) {
  auto ctx = self->state.ctx;
  auto id = self->state.info.id;
  auto spec = self->state.spec;
  auto image_deadline = std::chrono::steady_clock::now() + image_wait;
  run_blocking(self, *ctx->pool,
               [ctx, id, spec, image_deadline] {
                 auto res = provision(*ctx, id, spec, image_deadline);
                 if (!res.err) // issue 26: a layer's server, up before the answer
                   run_layer_start(res.sb, res.defaults, ctx->config.node_id, id);
                 return res;
               },
               [self, rp](provisioned& res) mutable {
                 auto& st = self->state;
                 if (res.err) {
                   rp.deliver(to_caf(res.err));
                   st.destroyed = true;
                   st.destroying = true;
                   st.info.state = sandbox_state::failed;
                   maybe_quit(self);
                   return;
                 }
                 st.sb = std::move(res.sb);
                 st.digests = std::move(res.digests);
                 st.spec.layers = res.layers; // the image's layer first
                 st.info.layers = std::move(res.layers);
                 st.exec_workdir = std::move(res.defaults.workdir);
                 st.exec_user = std::move(res.defaults.user);
                 st.info.state = sandbox_state::running;
                 st.info.created_at_ms = res.created_at_ms;
                 st.info.expires_at_ms = expiry(res.created_at_ms, st.spec.ttl_s);
                 ttl_arm(self);
                 watch_exit(self);
                 report_state(self);
                 // Answered once the log holds the spec (seq 0).
                 trajectory_open(self, [rp, info = st.info]() mutable { rp.deliver(info); });
                 if (st.destroying) { // destroy arrived while creating
                   st.destroying = false;
                   begin_destroy(self, "");
                 }
               });
}

} // namespace dsec
