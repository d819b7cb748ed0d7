// Pause, resume and snapshot of one sandbox (see sandbox_pause.hpp).
#include "actors/sandbox_pause.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_start.hpp"
#include "actors/sandbox_ttl.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "layers/store.hpp"

namespace dsec {

namespace {

/// Blocking: the sandbox's changes as a new snapshot layer. The running
/// sandbox is paused while its upper is read so the image is one consistent
/// state.
expected<snapshot_info> take_snapshot(const node_context& ctx, backends::sandbox& sb,
                                      const sandbox_info& info, std::string name,
                                      std::string version) {
  if (!ctx.store)
    return invalid_argument("snapshot " + info.id + ": this node has no layer store");
  auto began = std::chrono::steady_clock::now();
  auto dir = sb.changes_dir();
  if (!dir)
    return dir.err();
  if (name.empty())
    name = "snapshot/" + info.id;
  if (version.empty())
    version = std::to_string(now_ms());
  if (auto st = sb.pause(); !st)
    return st.err();
  auto layer = ctx.store->build(*dir, name, version, "snapshot");
  if (auto st = sb.resume(); !st && layer)
    return st.err();
  if (!layer)
    return error{layer.err().code, "snapshot " + info.id + ": " + layer.err().message};
  snapshot_info out;
  out.ref = layer->ref;
  out.digest = layer->digest;
  out.size_bytes = layer->size_bytes;
  out.layers = info.layers;
  out.layers.push_back(layer->ref);
  out.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now()
                                                              - began).count();
  return out;
}

} // namespace

std::function<expected<std::shared_ptr<backends::sandbox>>()>
resume_job(const sandbox_actor_state& st) {
  auto sb = st.sb;
  if (!sb->powered_off())
    return [sb]() -> expected<std::shared_ptr<backends::sandbox>> {
      if (auto res = sb->resume(); !res)
        return res.err();
      return sb;
    };
  auto spec = st.spec; // the layers mounted (the image's first) and the network it has now
  spec.cpu_class = st.info.cpu_class;
  return [ctx = st.ctx, id = st.info.id,
          spec = std::move(spec)]() -> expected<std::shared_ptr<backends::sandbox>> {
    // The sandbox holds its mounts (its digests); this hold is only for the
    // boot's directories and the layers' env and start command.
    auto held = ctx->layers->acquire(spec.layers);
    if (!held)
      return error{held.err().code, "boot " + id + " again: " + held.err().message};
    auto p = backend_params(*ctx, id, spec, *held);
    p.boot_again = true;
    auto* backend = ctx->backend_for(spec.backend);
    auto sb = backend ? backend->create(p)
                      : expected<std::shared_ptr<backends::sandbox>>(invalid_argument(
                          "boot " + id + " again: backend \"" + spec.backend
                          + "\" is not available"));
    ctx->layers->release(held->digests);
    if (sb)
      run_layer_start(*sb, held->config, ctx->config.node_id, id);
    return sb;
  };
}

void adopt_resumed(sandbox_actor_ptr self, std::shared_ptr<backends::sandbox> sb) {
  auto& st = self->state;
  if (sb == st.sb)
    return;
  st.sb = std::move(sb);
  watch_exit(self);
}

/// Pause or resume: `to` is the state after it. Idempotent: a sandbox
/// already in `to` answers at once.
void change_pause(sandbox_actor_ptr self, caf::response_promise rp, bool pause,
                  bool keep_memory) {
  auto& st = self->state;
  auto to = pause ? sandbox_state::paused : sandbox_state::running;
  if (st.info.state == to && !st.destroying && !st.changing) {
    rp.deliver(st.info);
    return;
  }
  // A resume while a call's resume (or a pause) is under way answers when the
  // sandbox runs again.
  if (!pause && !st.destroying && st.sb && st.changing
      && (st.info.state == sandbox_state::paused || st.pausing)) {
    st.after_resume.push_back({rp, [self](caf::response_promise rp) {
                                 rp.deliver(self->state.info);
                               }});
    return;
  }
  auto from = pause ? sandbox_state::running : sandbox_state::paused;
  if (st.info.state != from || st.destroying || !st.sb || st.changing) {
    rp.deliver(to_caf(st.changing ? conflict("sandbox " + st.info.id
                                             + " is being paused, resumed or snapshotted")
                                  : not_running(st)));
    return;
  }
  ++st.inflight;
  st.changing = true;
  st.pausing = pause;
  std::function<expected<std::shared_ptr<backends::sandbox>>()> job;
  if (pause)
    job = [sb = st.sb, keep_memory]() -> expected<std::shared_ptr<backends::sandbox>> {
      if (auto res = keep_memory ? sb->pause() : sb->power_off(); !res)
        return res.err();
      return sb;
    };
  else
    job = resume_job(st);
  st.booting = !pause && st.sb->powered_off();
  run_blocking(self, *st.ctx->pool, std::move(job),
               [self, rp, to, pause](expected<std::shared_ptr<backends::sandbox>>& res) mutable {
                 auto& st = self->state;
                 st.changing = false;
                 st.pausing = false;
                 expected<sandbox_info> out = res ? expected<sandbox_info>{st.info}
                                                  : expected<sandbox_info>{res.err()};
                 if (res && !st.destroying) {
                   adopt_resumed(self, std::move(*res));
                   st.info.state = to;
                   if (pause)
                     ttl_on_paused(self);
                   else
                     ttl_on_resumed(self);
                   report_state(self);
                   out = st.info;
                 }
                 run_deferred(self, res ? status{} : status{res.err()});
                 end_boot(self);
                 finish_op(self, rp, out);
               });
}

/// Snapshots the sandbox (resumed first if paused); one change at a time.
void start_snapshot(sandbox_actor_ptr self, caf::response_promise rp, std::string name,
                    std::string version) {
  auto retry = [self, name, version](caf::response_promise rp) {
    start_snapshot(self, std::move(rp), name, version);
  };
  if (!ready_for(self, rp, std::move(retry)))
    return;
  auto& st = self->state;
  if (st.changing) {
    rp.deliver(to_caf(conflict("sandbox " + st.info.id
                               + " is being paused, resumed or snapshotted")));
    return;
  }
  ++st.inflight;
  st.changing = true;
  run_blocking(self, *st.ctx->pool,
               [ctx = st.ctx, sb = st.sb, info = st.info, name = std::move(name),
                version = std::move(version)]() mutable {
                 return take_snapshot(*ctx, *sb, info, std::move(name), std::move(version));
               },
               [self, rp](expected<snapshot_info>& res) mutable {
                 self->state.changing = false;
                 run_deferred(self, status{});
                 finish_op(self, rp, res);
               });
}

} // namespace dsec
