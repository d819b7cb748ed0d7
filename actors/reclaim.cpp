// Reclaim actor implementation (see reclaim.hpp). One pass:
//   1. ask lifecycle for its sandboxes (usage_atom);
//   2. ask each running sandbox actor it has no backend for (usage_atom);
//   3. on the pool: usage() of every running sandbox, then /proc/meminfo;
//   4. pick the idle ones (reclaim_policy) and, on the pool, reclaim() them
//      and read /proc/meminfo again;
//   5. report to lifecycle and answer the (reclaim_atom) callers.
#include "actors/reclaim.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"

namespace dsec {

namespace {

/// Lifecycle and sandbox actors answer at once; past this the pass goes on
/// with what it has (core/clock.hpp).
constexpr auto ask_timeout = local_wait;

reclaim::host_memory read_proc_meminfo() {
  std::ifstream in{"/proc/meminfo"};
  std::stringstream text;
  text << in.rdbuf();
  return reclaim::parse_meminfo(text.str());
}

/// One sandbox's answer from the pool: a sample or the bytes reclaimed.
struct outcome {
  std::string id;
  bool gone = false;    // destroyed since it was listed
  bool skipped = false; // the pass's budget ran out before it
  error err;
  usage_sample sample;
  int64_t freed = 0;
};

struct pool_result {
  std::vector<outcome> each;
  reclaim::host_memory host;
};

using promises = std::vector<caf::response_promise>;

bool unsupported(const error& e) {
  return e.message.find("not supported") != std::string::npos;
}

/// The worker-pool job of a pass: `f` on each sandbox still alive, then one
/// read of the host. With a `clock`, sandboxes reached once it reads past
/// `deadline_ms` are skipped (left to the next pass).
template <class Targets, class ReadHost, class F>
auto pool_job(Targets targets, ReadHost read_host, F f,
              std::function<int64_t()> clock = {}, int64_t deadline_ms = 0) {
  return [targets = std::move(targets), read_host, f, clock, deadline_ms] {
    pool_result out;
    for (auto& [id, weak] : targets) {
      outcome o;
      o.id = id;
      if (clock && clock() >= deadline_ms)
        o.skipped = true;
      else if (auto sb = weak.lock())
        f(*sb, o);
      else
        o.gone = true;
      out.each.push_back(std::move(o));
    }
    out.host = read_host();
    return out;
  };
}

void log(reclaim_actor_ptr self, const std::string& what) {
  caf::aout(self) << "dsec node " << self->state.ctx->config.node_id << ": reclaim: " << what
                  << std::endl;
}

void begin_pass(reclaim_actor_ptr self);

reclaim::memory_report make_report(reclaim_actor_ptr self) {
  auto& st = self->state;
  auto now = st.opt.clock();
  reclaim::memory_report r;
  r.host = st.host;
  r.reclaimed_bytes_total = st.reclaimed_total;
  std::map<std::string, reclaim::tracked> all;
  int64_t sum = 0, n = 0;
  for (auto& [id, e] : st.sandboxes) {
    if (e.t.last_cpu_ns < 0 && e.t.reclaimed_bytes == 0)
      continue; // never measured
    reclaim::sandbox_memory m;
    m.id = id;
    m.resident_bytes = e.t.resident_bytes;
    m.swap_bytes = e.t.swap_bytes;
    m.reclaimed_bytes = e.t.reclaimed_bytes;
    m.idle_since_ms = e.state == sandbox_state::running ? e.t.idle_since_ms : 0;
    r.sandboxes.push_back(std::move(m));
    if (e.state != sandbox_state::running)
      continue;
    if (reclaim::is_idle(e.t, now, st.opt.tun))
      ++r.idle;
    sum += e.t.resident_bytes;
    ++n;
    all.emplace(id, e.t);
  }
  r.mean_resident_bytes = n > 0 ? sum / n : 0;
  r.reclaimable_bytes = st.opt.enabled ? reclaim::reclaimable_bytes(all, now, st.opt.tun) : 0;
  return r;
}

void end_pass(reclaim_actor_ptr self, promises waiters) {
  auto& st = self->state;
  st.busy = false;
  ++st.passes;
  auto report = make_report(self);
  self->send(st.lifecycle, usage_atom::value, report);
  for (auto& rp : waiters)
    rp.deliver(report);
  if (!st.waiters.empty()) // asked for while this pass ran
    begin_pass(self);
}

void on_squeezed(reclaim_actor_ptr self, pool_result& res, promises waiters) {
  auto& st = self->state;
  for (auto& o : res.each) {
    auto it = st.sandboxes.find(o.id);
    if (it == st.sandboxes.end() || o.gone)
      continue;
    auto& e = it->second;
    if (o.skipped)
      continue; // still wanted: the next pass takes it first
    if (o.err) {
      if (!e.reclaim_failed && o.err.code != errc::unavailable)
        log(self, "sandbox " + o.id + ": " + o.err.message);
      e.reclaim_failed = true;
      // Not asked again in this idle stretch: mark it as done with nothing freed.
      reclaim::record_reclaim(e.t, 0);
      continue;
    }
    reclaim::record_reclaim(e.t, o.freed);
    st.reclaimed_total += std::max<int64_t>(0, o.freed);
  }
  if (res.host.known)
    st.host = res.host;
  end_pass(self, std::move(waiters));
}

void on_sampled(reclaim_actor_ptr self, pool_result& res, promises waiters) {
  auto& st = self->state;
  auto now = st.opt.clock();
  for (auto& o : res.each) {
    auto it = st.sandboxes.find(o.id);
    if (it == st.sandboxes.end() || o.gone)
      continue;
    auto& e = it->second;
    if (o.err) {
      // A sandbox being destroyed answers unavailable ("gone"): not news.
      if (!e.usage_failed && o.err.code != errc::unavailable)
        log(self, "sandbox " + o.id + ": " + o.err.message
                    + (unsupported(o.err) ? "; not measured or reclaimed" : ""));
      e.usage_failed = true;
      continue;
    }
    e.usage_failed = false;
    reclaim::observe(e.t, o.sample, now, st.opt.tun);
  }
  if (res.host.known)
    st.host = res.host;
  std::vector<std::pair<std::string, std::weak_ptr<backends::sandbox>>> picked;
  if (st.opt.enabled) {
    std::map<std::string, reclaim::tracked> all;
    for (auto& [id, e] : st.sandboxes)
      if (e.state == sandbox_state::running && !e.usage_failed && !e.sb.expired())
        all.emplace(id, e.t);
    for (auto& id : reclaim::pick(all, now, st.opt.tun, st.opt.tun.max_per_pass))
      picked.emplace_back(id, st.sandboxes[id].sb);
  }
  if (picked.empty())
    return end_pass(self, std::move(waiters));
  auto read_host = st.opt.read_host;
  // A create waiting on this pass (waiters) lets it run longer: lifecycle
  // waits up to 10 s for the memory it frees.
  auto budget = st.opt.tun.pass_budget_ms * (waiters.empty() ? 1 : 2);
  run_blocking(self, *st.ctx->pool,
               pool_job(std::move(picked), read_host,
                        [](backends::sandbox& sb, outcome& o) {
                          auto freed = sb.reclaim();
                          if (freed)
                            o.freed = *freed;
                          else
                            o.err = freed.err();
                        },
                        st.opt.clock, now + budget),
               [self, waiters = std::move(waiters)](pool_result& res) mutable {
                 on_squeezed(self, res, std::move(waiters));
               });
}

/// Samples the running sandboxes with a backend that are due (all of them up
/// to tun.max_samples_per_pass, else the longest unmeasured), and the host,
/// on the pool.
void sample_all(reclaim_actor_ptr self, promises waiters) {
  auto& st = self->state;
  std::map<std::string, reclaim::tracked> running;
  for (auto& [id, e] : st.sandboxes)
    if (e.state == sandbox_state::running && !e.sb.expired())
      running.emplace_hint(running.end(), id, e.t);
  std::vector<std::pair<std::string, std::weak_ptr<backends::sandbox>>> targets;
  for (auto& id : reclaim::pick_samples(running, st.opt.tun))
    targets.emplace_back(id, st.sandboxes[id].sb);
  auto read_host = st.opt.read_host;
  run_blocking(self, *st.ctx->pool,
               pool_job(std::move(targets), read_host,
                        [](backends::sandbox& sb, outcome& o) {
                          auto got = sb.usage();
                          if (got)
                            o.sample = *got;
                          else
                            o.err = got.err();
                        }),
               [self, waiters = std::move(waiters)](pool_result& res) mutable {
                 on_sampled(self, res, std::move(waiters));
               });
}

/// Takes lifecycle's list into the table; asks sandbox actors without a
/// known backend for theirs, then samples.
void on_targets(reclaim_actor_ptr self, std::vector<reclaim_target>& targets, promises waiters) {
  auto& st = self->state;
  std::map<std::string, reclaim_entry> next;
  for (auto& t : targets) {
    auto& e = next[t.id];
    if (auto it = st.sandboxes.find(t.id); it != st.sandboxes.end())
      e = std::move(it->second);
    if (t.state != sandbox_state::running) {
      // Paused (its pause reclaimed), creating or stopping: left alone; a
      // resumed sandbox starts a new idle stretch.
      e.t.last_cpu_ns = -1;
      e.t.idle_since_ms = 0;
      e.t.resident_after_reclaim = -1;
    }
    e.state = t.state;
    e.actor = t.actor;
  }
  st.sandboxes = std::move(next);
  struct gather {
    size_t left = 0;
    promises waiters;
  };
  auto g = std::make_shared<gather>();
  g->waiters = std::move(waiters);
  std::vector<std::string> ask;
  for (auto& [id, e] : st.sandboxes)
    if (e.state == sandbox_state::running && e.sb.expired() && e.actor)
      ask.push_back(id);
  if (ask.empty())
    return sample_all(self, std::move(g->waiters));
  g->left = ask.size();
  auto done = [self, g] {
    if (--g->left == 0)
      sample_all(self, std::move(g->waiters));
  };
  for (auto& id : ask)
    self->request(st.sandboxes[id].actor, ask_timeout, usage_atom::value)
      .then(
        [self, id, done](backend_ref& ref) {
          if (auto it = self->state.sandboxes.find(id); it != self->state.sandboxes.end())
            it->second.sb = std::move(ref.sb);
          done();
        },
        [done](caf::error&) { done(); });
}

void begin_pass(reclaim_actor_ptr self) {
  auto& st = self->state;
  if (st.busy)
    return;
  st.busy = true;
  auto waiters = std::move(st.waiters);
  st.waiters.clear();
  self->request(st.lifecycle, ask_timeout, usage_atom::value)
    .then(
      [self, waiters](std::vector<reclaim_target>& targets) mutable {
        on_targets(self, targets, std::move(waiters));
      },
      [self, waiters](caf::error& err) mutable {
        log(self, "list sandboxes: " + self->system().render(err));
        end_pass(self, std::move(waiters));
      });
}

} // namespace

reclaim_options reclaim_options_from(const node_config& cfg) {
  reclaim_options o;
  o.interval_ms = cfg.reclaim_interval_ms;
  o.enabled = cfg.reclaim_idle_ms > 0;
  if (o.enabled)
    o.tun.idle_ms = cfg.reclaim_idle_ms; // else the default only names who is idle
  o.clock = now_ms;
  o.read_host = read_proc_meminfo;
  if (auto n = reclaim_samples_env(); n && *n > 0)
    o.tun.max_samples_per_pass = *n;
  return o;
}

expected<size_t> reclaim_samples_env() {
  const char* v = std::getenv("DSEC_RECLAIM_SAMPLES");
  if (!v)
    return size_t{0};
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n <= 0)
    return invalid_argument(std::string{"node: DSEC_RECLAIM_SAMPLES must be a positive whole "
                                        "number (sandboxes measured per reclaim pass), not \""}
                            + v + "\"");
  return static_cast<size_t>(n);
}

reclaim_actor::behavior_type reclaim_behavior(reclaim_actor_ptr self, node_context_ptr ctx,
                                              lifecycle_actor lifecycle, reclaim_options opt) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.lifecycle = std::move(lifecycle);
  if (!opt.clock)
    opt.clock = now_ms;
  if (!opt.read_host)
    opt.read_host = read_proc_meminfo;
  if (opt.interval_ms < 10)
    opt.interval_ms = 10;
  st.opt = std::move(opt);
  self->send(self, caf::tick_atom::value);
  return {
    [self](caf::tick_atom) {
      begin_pass(self);
      self->delayed_send(self, std::chrono::milliseconds(self->state.opt.interval_ms),
                         caf::tick_atom::value);
    },
    [self](reclaim_atom) -> caf::result<reclaim::memory_report> {
      auto rp = self->make_response_promise();
      self->state.waiters.push_back(rp);
      begin_pass(self); // or the next one, when a pass is running
      return rp;
    },
    [](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace dsec
