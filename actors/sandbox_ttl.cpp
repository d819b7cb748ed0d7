// The TTL of a sandbox actor over pauses (see sandbox_ttl.hpp).
#include "actors/sandbox_ttl.hpp"

#include <chrono>
#include <iostream>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/node_context.hpp"
#include "actors/sandbox.hpp"
#include "actors/sandbox_record.hpp"
#include "core/clock.hpp"
#include "core/ttl.hpp"

namespace dsec {

namespace {

/// Writes the TTL state into the sandbox's record on the worker pool: in
/// order (a write older than the last one written is dropped) and never
/// after teardown.
void persist(sandbox_actor_ptr self, int64_t paused_at_ms) {
  auto& st = self->state;
  auto seq = ++st.ttl.seq;
  st.ctx->pool->post([g = st.ttl.file, seq, ctx = st.ctx, id = st.info.id, paused_at_ms,
                      left = paused_at_ms != 0 ? st.info.ttl_left_ms : 0,
                      expires = st.info.expires_at_ms] {
    std::lock_guard<std::mutex> lock{g->m};
    if (g->closed || seq <= g->written)
      return;
    g->written = seq;
    auto res = update_sandbox_record(*ctx, id, [&](json_codec::sandbox_record& rec) {
      rec.paused_at_ms = paused_at_ms;
      rec.ttl_left_ms = left;
      rec.expires_at_ms = expires;
    });
    if (!res)
      std::cout << "sandbox " << id << ": keep ttl state: " << res.err().message << std::endl;
  });
}

} // namespace

void ttl_arm(sandbox_actor_ptr self) {
  auto& st = self->state;
  auto gen = ++st.ttl.gen;
  auto at = st.info.state == sandbox_state::paused ? st.info.paused_expires_at_ms
                                                    : st.info.expires_at_ms;
  if (at == 0)
    return;
  auto left = at - now_ms();
  if (left <= 0)
    self->send(self, ttl_atom::value, gen);
  else
    self->delayed_send(self, std::chrono::milliseconds(left), ttl_atom::value, gen);
}

void ttl_on_paused(sandbox_actor_ptr self) {
  auto& info = self->state.info;
  auto now = now_ms();
  info.ttl_left_ms = info.ttl_s > 0 ? ttl::left_at(info.expires_at_ms, now) : 0;
  info.expires_at_ms = 0;
  info.paused_expires_at_ms = ttl::paused_deadline(now, info.paused_ttl_s);
  ttl_arm(self);
  persist(self, now);
}

void ttl_on_resumed(sandbox_actor_ptr self) {
  auto& info = self->state.info;
  auto now = now_ms();
  info.expires_at_ms = info.ttl_s > 0 ? ttl::expires_after_resume(info.ttl_left_ms, now) : 0;
  info.ttl_left_ms = 0;
  info.paused_expires_at_ms = 0;
  ttl_arm(self);
  persist(self, 0);
}

void ttl_set(sandbox_actor_ptr self, int64_t ttl_s) {
  auto& info = self->state.info;
  info.ttl_s = ttl_s;
  if (info.state == sandbox_state::paused) {
    info.ttl_left_ms = ttl_s * 1000;
    persist(self, info.paused_expires_at_ms - info.paused_ttl_s * 1000);
  } else {
    info.expires_at_ms = ttl_s > 0 ? now_ms() + ttl_s * 1000 : 0;
    persist(self, 0);
  }
  ttl_arm(self);
}

std::string ttl_due(sandbox_actor_ptr self, uint64_t gen) {
  auto& st = self->state;
  if (gen != st.ttl.gen || st.destroying)
    return {};
  if (st.info.state != sandbox_state::paused)
    return "ttl expired";
  if (st.changing) { // a resume is under way: it decides (and re-arms)
    self->delayed_send(self, std::chrono::seconds(1), ttl_atom::value, gen);
    return {};
  }
  auto paused_for = (now_ms() - (st.info.paused_expires_at_ms - st.info.paused_ttl_s * 1000)) / 1000;
  std::cout << "dsec node " << st.ctx->config.node_id << ": sandbox " << st.info.id
            << ": paused for " << paused_for << " s, past its paused_ttl_s of "
            << st.info.paused_ttl_s << " s: destroying it" << std::endl;
  return "paused ttl expired: paused_ttl_s " + std::to_string(st.info.paused_ttl_s);
}

void ttl_adopt(sandbox_actor_ptr self, const recovered_sandbox& rec) {
  auto& info = self->state.info;
  if (rec.paused_at_ms != 0) {
    info.state = sandbox_state::paused;
    info.expires_at_ms = 0;
    info.ttl_left_ms = rec.ttl_left_ms;
    info.paused_expires_at_ms = ttl::paused_deadline(rec.paused_at_ms, info.paused_ttl_s);
  }
  ttl_arm(self);
}

void ttl_close(ttl_file_guard& g) {
  std::lock_guard<std::mutex> lock{g.m};
  g.closed = true;
}

} // namespace dsec
