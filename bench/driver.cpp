// Trial loops, the parallel burst, the idle-memory measurement and the ratios.
#include "bench/driver.hpp"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>

#include "bench/stats.hpp"

namespace dsec::bench {

namespace {

using nlohmann::json;

// Thread-safe error collector: counts all, keeps the first few messages.
class error_log {
 public:
  void add(const std::string& phase, const error& e) {
    std::lock_guard<std::mutex> g(mu_);
    ++count_;
    if (kept_.size() < 8)
      kept_.push_back(phase + ": " + e.message);
  }
  json to_json() const { return kept_; }
  int count() const { return count_; }

 private:
  std::mutex mu_;
  int count_ = 0;
  std::vector<std::string> kept_;
};

void log(const bench_target& t, const std::string& what) {
  std::cerr << "bench " << t.name() << ": " << what << std::endl;
}

// Warm-up trials, then up to o.samples timed ones within the phase cap. Gives
// up after 5 failures without a success (the system is not working).
template <class Trial>
latency_summary latency(const burst_options& o, const std::string& phase, error_log& errs,
                        Trial trial) {
  for (int i = 0; i < o.warmup; ++i)
    (void)trial();
  std::vector<double> ms;
  int failed = 0;
  stopwatch phase_clock;
  for (int i = 0; i < o.samples && phase_clock.ms() < o.phase_cap_s * 1000; ++i) {
    auto r = trial();
    if (r) {
      ms.push_back(*r);
    } else {
      errs.add(phase, r.err());
      if (++failed >= 5 && ms.empty())
        break;
    }
  }
  return summarize(std::move(ms));
}

// One long-lived thread per worker. Long-lived on purpose: bwrap's
// --die-with-parent fires when the *thread* that forked it exits, so threads
// that ended after the create phase would kill the sandboxes they started.
class worker_team {
 public:
  explicit worker_team(std::vector<std::unique_ptr<bench_worker>> ws) : ws_(std::move(ws)) {
    for (auto& w : ws_)
      threads_.emplace_back([this, wp = w.get()] { loop(*wp); });
  }
  ~worker_team() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& th : threads_)
      th.join();
  }
  [[nodiscard]] size_t size() const { return ws_.size(); }

  /// Runs fn(worker, i) for i in [0, n) across the team; returns seconds.
  double run(size_t n, std::function<void(bench_worker&, size_t)> fn) {
    stopwatch sw;
    std::unique_lock<std::mutex> lk(mu_);
    fn_ = std::move(fn);
    n_ = n;
    next_ = 0;
    busy_ = ws_.size();
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(lk, [&] { return busy_ == 0; });
    return sw.ms() / 1000.0;
  }

 private:
  void loop(bench_worker& w) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      for (size_t i; (i = next_++) < n_;) {
        lk.unlock();
        fn_(w, i);
        lk.lock();
      }
      if (--busy_ == 0)
        done_cv_.notify_all();
    }
  }

  std::vector<std::unique_ptr<bench_worker>> ws_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void(bench_worker&, size_t)> fn_;
  size_t n_ = 0, next_ = 0, busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

using workers = worker_team;

struct phase_result {
  std::vector<std::string> handles; // created ones ("" for failures)
  size_t ok = 0;
  double seconds = 0;
};

phase_result create_many(workers& ws, size_t n, error_log& errs) {
  phase_result r;
  r.handles.resize(n);
  std::atomic<size_t> ok{0};
  r.seconds = ws.run(n, [&](bench_worker& w, size_t i) {
    auto h = w.create_idle();
    if (h) {
      r.handles[i] = *h;
      ++ok;
    } else {
      errs.add("burst create", h.err());
    }
  });
  r.ok = ok;
  return r;
}

phase_result destroy_many(workers& ws, const std::vector<std::string>& handles, error_log& errs) {
  std::vector<std::string> live;
  for (const auto& h : handles)
    if (!h.empty())
      live.push_back(h);
  phase_result r;
  std::atomic<size_t> ok{0};
  r.seconds = ws.run(live.size(), [&](bench_worker& w, size_t i) {
    if (auto st = w.destroy(live[i]); st)
      ++ok;
    else
      errs.add("burst destroy", st.err());
  });
  r.ok = ok;
  return r;
}

double rate(size_t ok, double seconds) {
  return seconds > 0 ? std::round(static_cast<double>(ok) / seconds * 10) / 10 : 0;
}

json run_burst(workers& ws, const burst_options& o, error_log& errs) {
  auto c = create_many(ws, static_cast<size_t>(o.count), errs);
  auto d = destroy_many(ws, c.handles, errs);
  return {{"count", o.count},           {"inflight", ws.size()},
          {"created", c.ok},            {"create_s", round3(c.seconds)},
          {"create_per_s", rate(c.ok, c.seconds)},
          {"destroyed", d.ok},          {"destroy_s", round3(d.seconds)},
          {"destroy_per_s", rate(d.ok, d.seconds)}};
}

json run_memory(bench_target& t, workers& ws, const burst_options& o, error_log& errs) {
  auto before = t.read_memory({});
  auto c = create_many(ws, static_cast<size_t>(o.idle), errs);
  // Let fresh sandboxes finish starting (init, first page faults) before reading.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<std::string> live;
  for (const auto& h : c.handles)
    if (!h.empty())
      live.push_back(h);
  auto after = t.read_memory(live);
  destroy_many(ws, c.handles, errs);
  if (c.ok == 0)
    return nullptr;
  auto per = [&](double a, double b) { return round3((a - b) / 1024.0 / static_cast<double>(c.ok)); };
  double manager = per(after.manager_kb, before.manager_kb);
  double sandbox = per(after.sandbox_kb, before.sandbox_kb);
  json cg = after.cgroup_kb < 0 || before.cgroup_kb < 0 ? json(nullptr)
                                                        : json(per(after.cgroup_kb, before.cgroup_kb));
  return {{"sandboxes", c.ok},
          {"mb_per_sandbox", round3(manager + sandbox)},
          {"manager_mb_per_sandbox", manager},
          {"in_sandbox_pss_mb_per_sandbox", sandbox},
          {"cgroup_mb_per_sandbox", cg}};
}

json flat_metrics(const latency_summary& cfo, const latency_summary* ex, const json& burst,
                  const json& mem) {
  auto or_null = [](size_t n, double v) { return n ? json(round3(v)) : json(nullptr); };
  json m;
  m["create_first_output_p50_ms"] = or_null(cfo.n, cfo.p50);
  m["create_first_output_p90_ms"] = or_null(cfo.n, cfo.p90);
  m["create_first_output_p99_ms"] = or_null(cfo.n, cfo.p99);
  m["exec_true_p50_ms"] = ex ? or_null(ex->n, ex->p50) : json(nullptr);
  m["exec_true_p99_ms"] = ex ? or_null(ex->n, ex->p99) : json(nullptr);
  m["burst_create_per_s"] = burst["created"].get<size_t>() ? burst["create_per_s"] : json(nullptr);
  m["burst_destroy_per_s"] = burst["destroyed"].get<size_t>() ? burst["destroy_per_s"] : json(nullptr);
  m["idle_mb_per_sandbox"] = mem.is_null() ? json(nullptr) : mem["mb_per_sandbox"];
  return m;
}

} // namespace

json run_all(bench_target& t, const burst_options& o) {
  error_log errs;
  json detail;
  log(t, "create + first output, " + std::to_string(o.samples) + " trials");
  auto cfo = latency(o, "create_first_output", errs, [&] { return t.create_first_output(); });
  detail["create_first_output_ms"] = to_json(cfo);
  latency_summary ex;
  bool exec_ok = false;
  if (t.supports_exec()) {
    log(t, "exec true, " + std::to_string(o.samples) + " trials");
    if (auto st = t.start_exec_sandbox(); st) {
      ex = latency(o, "exec_true", errs, [&] { return t.exec_true(); });
      exec_ok = true;
    } else {
      errs.add("exec sandbox", st.err());
    }
    t.stop_exec_sandbox();
  }
  detail["exec_true_ms"] = exec_ok ? to_json(ex) : json(nullptr);
  std::vector<std::unique_ptr<bench_worker>> team;
  for (int i = 0; i < o.inflight; ++i)
    team.push_back(t.make_worker());
  worker_team ws(std::move(team));
  log(t, "burst of " + std::to_string(o.count) + ", " + std::to_string(o.inflight) + " in flight");
  detail["burst"] = run_burst(ws, o, errs);
  log(t, "memory of " + std::to_string(o.idle) + " idle sandboxes");
  detail["idle_memory"] = run_memory(t, ws, o, errs);
  t.cleanup();
  return {{"metrics", flat_metrics(cfo, exec_ok ? &ex : nullptr, detail["burst"], detail["idle_memory"])},
          {"detail", detail},
          {"error_count", errs.count()},
          {"errors", errs.to_json()},
          {"notes", t.notes()}};
}

json compute_ratios(const json& systems) {
  json out = json::object();
  if (!systems.contains("dsec") || !systems["dsec"].contains("metrics"))
    return out;
  const auto& d = systems["dsec"]["metrics"];
  auto ratio = [](const json& num, const json& den) {
    if (!num.is_number() || !den.is_number() || den.get<double>() <= 0)
      return json(nullptr);
    return json(std::round(num.get<double>() / den.get<double>() * 100) / 100);
  };
  for (const auto& [name, sys] : systems.items()) {
    if (name == "dsec" || !sys.contains("metrics"))
      continue;
    const auto& p = sys["metrics"];
    out["create_first_output_p50_speedup_vs_" + name] = ratio(p["create_first_output_p50_ms"], d["create_first_output_p50_ms"]);
    out["create_first_output_p99_speedup_vs_" + name] = ratio(p["create_first_output_p99_ms"], d["create_first_output_p99_ms"]);
    out["exec_true_p50_speedup_vs_" + name] = ratio(p["exec_true_p50_ms"], d["exec_true_p50_ms"]);
    out["exec_true_p99_speedup_vs_" + name] = ratio(p["exec_true_p99_ms"], d["exec_true_p99_ms"]);
    out["burst_create_rate_ratio_vs_" + name] = ratio(d["burst_create_per_s"], p["burst_create_per_s"]);
    out["burst_destroy_rate_ratio_vs_" + name] = ratio(d["burst_destroy_per_s"], p["burst_destroy_per_s"]);
    out["idle_memory_ratio_vs_" + name] = ratio(p["idle_mb_per_sandbox"], d["idle_mb_per_sandbox"]);
  }
  return out;
}

} // namespace dsec::bench
