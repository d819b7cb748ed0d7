// Idle policies and the TTL's end (see sandbox_idle.hpp).
#include "actors/sandbox_idle.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/sandbox.hpp"
#include "core/clock.hpp"

namespace dsec {

namespace {

void log(const sandbox_actor_state& st, const std::string& what) {
  std::cout << "dsec node " << st.ctx->config.node_id << ": sandbox " << st.info.id << ": "
            << what << std::endl;
}

} // namespace

void idle_on_call(sandbox_actor_ptr self) { self->state.idle.last_call_ms = now_ms(); }

policy_action idle_due(sandbox_actor_ptr self, int64_t cpu_idle_since_ms) {
  auto& st = self->state;
  auto limit_ms = st.spec.idle_timeout_s * 1000;
  if (limit_ms <= 0 || cpu_idle_since_ms <= 0 || st.info.state != sandbox_state::running
      || st.changing || st.destroying || st.inflight > 0)
    return {};
  auto now = now_ms();
  auto quiet_since = std::max(cpu_idle_since_ms, st.idle.last_call_ms);
  if (now - quiet_since < limit_ms)
    return {};
  auto what = "no call and no CPU for " + std::to_string((now - quiet_since) / 1000)
              + " s, past its idle_timeout_s of " + std::to_string(st.spec.idle_timeout_s)
              + " s";
  if (st.spec.on_idle == "pause" || st.spec.on_idle == "pause_files") {
    log(st, what + ": pausing it (on_idle " + st.spec.on_idle + ")");
    return {policy_action::pause, {}, st.spec.on_idle == "pause"};
  }
  log(st, what + ": destroying it (on_idle destroy)");
  return {policy_action::destroy,
          "idle timeout: idle_timeout_s " + std::to_string(st.spec.idle_timeout_s)};
}

policy_action timeout_due(sandbox_actor_ptr self) {
  auto& st = self->state;
  if (st.spec.on_timeout != "pause" && st.spec.on_timeout != "pause_files")
    return {policy_action::destroy, "ttl expired"};
  if (st.changing) { // a snapshot or a resume is under way: try again soon
    self->delayed_send(self, std::chrono::seconds(1), ttl_atom::value, st.ttl.gen);
    return {};
  }
  log(st, "its ttl_s of " + std::to_string(st.info.ttl_s) + " s ran out: pausing it (on_timeout "
            + st.spec.on_timeout + "); it gets the whole ttl_s again when it resumes");
  // The pause keeps what is left of expires_at for the next run: all of it.
  st.info.expires_at_ms = now_ms() + st.info.ttl_s * 1000;
  return {policy_action::pause, {}, st.spec.on_timeout == "pause"};
}

} // namespace dsec
