// PATCH /v1/sandboxes/{id} in the sandbox actor: the CPU class, then the
// network policy, on the worker pool; the record keeps the class for a
// restarted node. Split from sandbox.cpp by subject.
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_update.hpp"

#include <caf/all.hpp>

#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/sandbox_procs.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

/// What an update job did: the parts applied before the first failure.
struct update_outcome {
  bool class_applied = false;
  bool network_applied = false;
  error err;
};

/// Blocking: cpu class, then network, then the record (so a restarted node
/// keeps the class; the spec in it stays as created, for request_id
/// matching, and a restarted node starts loopback-only as ever); stops at
/// the first failure.
update_outcome apply_update(const node_context& ctx, backends::sandbox& sb,
                            const sandbox_info& info, const sandbox_spec& spec,
                            const std::vector<std::string>& digests, const std::string& cls,
                            bool set_net, const network_policy& policy) {
  update_outcome out;
  auto fail = [&](const error& e) {
    std::string done = out.class_applied ? " (cpu_class " + cls + " was applied)" : "";
    out.err = error{e.code, "update " + info.id + ": " + e.message + done};
  };
  if (!cls.empty()) {
    if (auto st = sb.set_cpu_class(cls); !st)
      fail(st.err());
    else
      out.class_applied = true;
  }
  if (set_net && !out.err) {
    if (auto st = sb.set_network(policy); !st)
      fail(st.err());
    else
      out.network_applied = true;
  }
  if (out.class_applied)
    if (auto st = write_record(ctx, info.id, spec, info.created_at_ms, digests, cls); !st)
      fail(st.err());
  return out;
}

} // namespace

void update_sandbox(sandbox_actor_ptr self, caf::response_promise rp, std::string cls,
                    bool set_net, network_policy policy) {
  if (!ready_for(self, rp, [self, cls, set_net, policy](caf::response_promise rp) {
        update_sandbox(self, std::move(rp), cls, set_net, policy);
      }))
    return;
  auto& st = self->state;
  ++st.inflight;
  run_blocking(self, *st.ctx->pool,
               [ctx = st.ctx, sb = st.sb, info = st.info, spec = st.spec, digests = st.digests,
                cls, set_net, policy] {
                 return apply_update(*ctx, *sb, info, spec, digests, cls, set_net, policy);
               },
               [self, rp, cls, policy](update_outcome& res) mutable {
                 auto& st = self->state;
                 if (res.class_applied) {
                   st.info.cpu_class = cls;
                   report_state(self);
                 }
                 if (res.network_applied)
                   st.spec.network = policy;
                 if (res.err)
                   rp.deliver(to_caf(res.err));
                 else
                   rp.deliver(st.info);
                 end_op(self);
               });
}


} // namespace dsec
