// Deterministic actor tests of the reclaim actor with the lifecycle actor on
// CAF's test coordinator: fake sandboxes whose usage() the test scripts, a
// fake clock and host, a worker pool that runs only when the test drives it.
// Idle ones get reclaim() called, busy and paused ones do not, a usage() that
// fails is survived, and a create under memory pressure reclaims first and
// is refused with resource_exhausted only when that is not enough.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/lifecycle.hpp"
#include "actors/reclaim.hpp"
#include "actors/wire_types.hpp"
#include "core/inspect.hpp"
#include "sys/fs.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// One fake sandbox's script, shared with the test (by the sandbox's label "name").
struct script {
  int64_t cpu_ms = 0;
  int64_t resident_mb = 100;
  int64_t swap_mb = 0;
  /// usage() fails with this (none = succeeds).
  error usage_err;
  int reclaims = 0;
  bool paused = false;
  /// Each reclaim() takes this long on the fake clock (a slow squeeze).
  int64_t reclaim_ms = 0;
};

struct world {
  std::map<std::string, std::shared_ptr<script>> by_name;
  /// MiB freed by every reclaim so far (the fake host gets them back).
  int64_t freed_mb = 0;
  /// The fixture's fake clock (unix ms), which a slow reclaim moves.
  std::shared_ptr<int64_t> clock;
};

class fake_sandbox final : public backends::sandbox {
 public:
  fake_sandbox(std::shared_ptr<world> w, std::shared_ptr<script> s, std::string dir)
    : w_(std::move(w)), s_(std::move(s)), dir_(std::move(dir)) {}
  uint64_t exec(exec_request, backends::exec_callbacks cb) override {
    cb.on_done(exec_result{});
    return 1;
  }
  void cancel(uint64_t) override {}
  status write_file(const std::string&, std::string_view, uint32_t) override { return {}; }
  expected<std::string> read_file(const std::string&, size_t) override { return std::string{}; }
  void on_exit(std::function<void(std::string)>) override {}
  status destroy() override { return sys::remove_tree(dir_); }
  int init_pid() const override { return 1; }
  status pause() override {
    s_->paused = true;
    return {};
  }
  status resume() override {
    s_->paused = false;
    return {};
  }
  expected<usage_sample> usage() override {
    if (s_->usage_err)
      return s_->usage_err;
    usage_sample u;
    u.cpu_ns = s_->cpu_ms * 1000000;
    u.resident_bytes = s_->resident_mb << 20;
    u.swap_bytes = s_->swap_mb << 20;
    return u;
  }
  expected<int64_t> reclaim() override {
    ++s_->reclaims;
    *w_->clock += s_->reclaim_ms;
    auto freed = s_->resident_mb * 3 / 4; // its cold part goes to zram
    s_->resident_mb -= freed;
    s_->swap_mb += freed / 3;
    w_->freed_mb += freed;
    return freed << 20;
  }

 private:
  std::shared_ptr<world> w_;
  std::shared_ptr<script> s_;
  std::string dir_;
};

class fake_backend final : public backends::backend {
 public:
  explicit fake_backend(std::shared_ptr<world> w) : w_(std::move(w)) {}
  std::string_view name() const override { return "container"; }
  expected<std::shared_ptr<backends::sandbox>> create(const backends::create_params& p) override {
    if (auto st = sys::make_dirs(p.dir, 0700); !st)
      return st.err();
    auto& s = w_->by_name[p.spec.labels.at("name")];
    if (!s)
      s = std::make_shared<script>();
    return std::shared_ptr<backends::sandbox>{std::make_shared<fake_sandbox>(w_, s, p.dir)};
  }
  expected<std::shared_ptr<backends::sandbox>> recover(const std::string&,
                                                       const std::string&) override {
    return unavailable("no recover in fakes");
  }

 private:
  std::shared_ptr<world> w_;
};

class fake_layers final : public layer_source {
 public:
  expected<held_layers> acquire(const std::vector<std::string>& refs) override {
    held_layers h;
    for (auto& r : refs) {
      h.dirs.push_back("/mnt/" + r);
      h.digests.push_back("sha256:" + r);
    }
    return h;
  }
  void release(const std::vector<std::string>&) override {}
  expected<std::vector<layer_info>> list() override { return std::vector<layer_info>{}; }
};

constexpr int64_t interval_ms = 1000;

struct fixture : test::coordinated_system {
  std::shared_ptr<world> w = std::make_shared<world>();
  node_context_ptr ctx = std::make_shared<node_context>();
  lifecycle_actor lc;
  reclaim_actor rc;
  /// The fake wall clock (unix ms) and the host's MemAvailable before reclaim.
  std::shared_ptr<int64_t> now = std::make_shared<int64_t>(1700000000000);
  std::shared_ptr<int64_t> avail_mb = std::make_shared<int64_t>(16000);

  fixture() {
    w->clock = now;
    ctx->config.node_id = "n-test";
    char tmpl[] = "/tmp/dsec-reclaim-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    ctx->config.state_dir = tmpl;
    ctx->config.max_sandboxes = 16;
    ctx->config.memory_headroom_mb = 512;
    ctx->config.overcommit = 0;
    ctx->container = std::make_shared<fake_backend>(w);
    ctx->layers = std::make_shared<fake_layers>();
    ctx->pool = std::make_shared<sys::worker_pool>(0);
    lc = sys->spawn(lifecycle_behavior, ctx);
    reclaim_options opt;
    opt.interval_ms = interval_ms;
    opt.tun.idle_ms = 3000;
    opt.clock = [now = now] { return *now; };
    opt.read_host = [avail = avail_mb, w = w] {
      reclaim::host_memory h;
      h.known = true;
      h.total_mb = 24000;
      h.available_mb = *avail + w->freed_mb;
      return h;
    };
    rc = sys->spawn(reclaim_behavior, ctx, lc, opt);
    caf::anon_send(lc, reclaim_atom::value, rc);
    drive();
  }

  ~fixture() {
    ask<bool>(shutdown_atom::value);
    caf::anon_send_exit(rc, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(lc, caf::exit_reason::user_shutdown);
    drive();
    (void)sys::remove_tree(ctx->config.state_dir);
  }

  void drive() {
    for (;;) {
      auto n = sched->run() + ctx->pool->run_pending();
      if (n == 0)
        return;
    }
  }

  /// One reclaim interval passes: the clock moves, the tick fires, the pass runs.
  void tick() {
    *now += interval_ms;
    sched->advance_time(std::chrono::milliseconds(interval_ms));
    drive();
  }

  /// Sends without driving; the answer lands in the slot once the test drives.
  template <class T, class Handle, class... Ts>
  test::reply_slot<T> send_only(Handle dest, Ts... xs) {
    return test::send_only<T>(*sys, dest, xs...);
  }

  template <class T, class Handle, class... Ts>
  expected<T> ask_of(Handle dest, Ts... xs) {
    auto out = send_only<T>(dest, xs...);
    drive();
    REQUIRE(out->has_value());
    return std::move(**out);
  }

  template <class T, class... Ts>
  expected<T> ask(Ts... xs) {
    return ask_of<T>(lc, xs...);
  }

  /// Creates a sandbox whose fake backend follows w->by_name[name].
  std::string create(const std::string& name, int64_t memory_mb = 512) {
    auto& s = w->by_name[name];
    if (!s)
      s = std::make_shared<script>();
    sandbox_spec spec;
    spec.layers = {"base/busybox@1"};
    spec.ttl_s = 0;
    spec.memory_mb = memory_mb;
    spec.labels = {{"name", name}};
    auto info = ask<sandbox_info>(create_atom::value, spec);
    REQUIRE(info.ok());
    return info->id;
  }

  script& of(const std::string& name) { return *w->by_name.at(name); }
};

} // namespace

TEST_CASE_METHOD(fixture, "reclaim: idle sandboxes are squeezed once, busy and paused ones not",
                 "[actor][reclaim]") {
  auto idle = create("idle");
  create("busy");
  auto paused = create("paused");
  create("broken");
  create("unsupported");
  of("broken").usage_err = internal_error("read memory.usage_in_bytes: EIO");
  of("unsupported").usage_err =
    error{errc::invalid_argument, "measure usage: not supported by this sandbox's backend"};
  REQUIRE(ask<sandbox_info>(pause_atom::value, paused)->state == sandbox_state::paused);
  for (int i = 0; i < 8; ++i) {
    of("busy").cpu_ms += 500; // half a core
    tick();
  }
  CHECK(of("idle").reclaims == 1); // once: it stayed idle and did not grow
  CHECK(of("busy").reclaims == 0);
  CHECK(of("paused").reclaims == 0);
  CHECK(of("broken").reclaims == 0);
  CHECK(of("unsupported").reclaims == 0);

  // GET /v1/sandboxes/{id} and /metrics see the figures.
  auto got = ask<sandbox_info>(info_atom::value, idle);
  REQUIRE(got.ok());
  CHECK(got->reclaimed_bytes == (75ll << 20));
  CHECK(got->resident_bytes == (25ll << 20));
  CHECK(got->swap_bytes == (25ll << 20));
  CHECK(got->idle_since_ms > 0);
  auto status = ask<node_status>(status_atom::value);
  REQUIRE(status.ok());
  CHECK(status->reclaimed_bytes_total == (75ll << 20));
  CHECK(status->idle_sandboxes == 1);
  CHECK(status->memory_available_mb == 16000 + 75);
  CHECK(status->memory_free_mb == 16000 + 75 - 512);

  // It grows while idle: squeezed again. It wakes: a new idle stretch.
  of("idle").resident_mb += 40;
  tick();
  CHECK(of("idle").reclaims == 2);
  of("idle").cpu_ms += 2000;
  tick();
  CHECK(ask<sandbox_info>(info_atom::value, idle)->idle_since_ms == 0);
  for (int i = 0; i < 5; ++i)
    tick();
  CHECK(of("idle").reclaims == 3);

  // The broken backend recovers: measured again, the actor survived.
  of("broken").usage_err = error{};
  for (int i = 0; i < 5; ++i)
    tick();
  CHECK(of("broken").reclaims == 1);
  // A resumed sandbox is measured again, from a fresh idle stretch.
  REQUIRE(ask<sandbox_info>(resume_atom::value, paused).ok());
  tick();
  CHECK(of("paused").reclaims == 0);
  for (int i = 0; i < 5; ++i)
    tick();
  CHECK(of("paused").reclaims == 1);
}

TEST_CASE_METHOD(fixture, "reclaim: a pass stops at its time budget and the next one goes on",
                 "[actor][reclaim]") {
  // Five idle sandboxes whose squeeze takes 900 ms each: a 2 s pass reaches
  // three (it starts one while under budget), the next pass the other two,
  // and nobody is squeezed twice.
  std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  for (auto& n : names) {
    create(n);
    of(n).reclaim_ms = 900;
  }
  auto total = [&] {
    int sum = 0;
    for (auto& n : names)
      sum += of(n).reclaims;
    return sum;
  };
  for (int i = 0; i < 4 && total() == 0; ++i)
    tick();
  CHECK(total() == 3);
  tick();
  CHECK(total() == 5);
  for (auto& n : names)
    CHECK(of(n).reclaims == 1);
  for (int i = 0; i < 3; ++i)
    tick();
  CHECK(total() == 5);
}

TEST_CASE_METHOD(fixture, "admission: a create under pressure reclaims first, then is refused",
                 "[actor][reclaim]") {
  create("idle-a");
  create("idle-b");
  *avail_mb = 520; // below need (100: what the sandboxes measure) + headroom (512)
  tick();
  sandbox_spec spec;
  spec.layers = {"base/busybox@1"};
  spec.ttl_s = 0;
  spec.labels = {{"name", "new"}};
  // Nobody idle long enough: the reclaim pass frees nothing, so 429 naming memory.
  auto refused = ask<sandbox_info>(create_atom::value, spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.err().code == errc::resource_exhausted);
  CHECK_THAT(refused.err().message,
             Catch::Contains("node n-test has 520 MiB of memory available")
               && Catch::Contains("needs 100 MiB plus 512 MiB headroom"));
  CHECK(of("idle-a").reclaims + of("idle-b").reclaims == 0);

  // Later, both idle past the threshold but no tick has come yet: the create
  // asks the reclaim actor, which squeezes both and samples again; it fits.
  *now += 3500;
  auto admitted = ask<sandbox_info>(create_atom::value, spec);
  REQUIRE(admitted.ok());
  CHECK(admitted->state == sandbox_state::running);
  CHECK(of("idle-a").reclaims == 1);
  CHECK(of("idle-b").reclaims == 1);

  // Nothing left to reclaim and memory short again: 429, and the node still
  // answers everything else.
  *avail_mb = 0;
  tick();
  spec.labels = {{"name", "third"}};
  auto again = ask<sandbox_info>(create_atom::value, spec);
  REQUIRE_FALSE(again.ok());
  CHECK(again.err().code == errc::resource_exhausted);
  CHECK_THAT(again.err().message, Catch::Contains("after reclaiming idle sandboxes"));
  CHECK(of("idle-a").reclaims == 1);
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{})
          ->size() == 3);
}

TEST_CASE_METHOD(fixture, "admission: the overcommit cap refuses past the sum of limits",
                 "[actor][reclaim]") {
  ctx->config.overcommit = 0.05; // 5% of 24000 MiB: 1200 MiB of limits
  create("a", 512);
  create("b", 512);
  sandbox_spec spec;
  spec.layers = {"base/busybox@1"};
  spec.ttl_s = 0;
  spec.labels = {{"name", "c"}};
  auto refused = ask<sandbox_info>(create_atom::value, spec);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.err().code == errc::resource_exhausted);
  CHECK_THAT(refused.err().message, Catch::Contains("overcommit cap of 1200 MiB"));
}

TEST_CASE_METHOD(fixture, "admission: a retry with the same request_id while the first waits "
                          "for reclaim gets the same sandbox", "[actor][reclaim]") {
  create("idle-a");
  *avail_mb = 520;
  tick();
  *now += 3500; // idle-a idle: the first create's reclaim frees enough
  sandbox_spec spec;
  spec.layers = {"base/busybox@1"};
  spec.ttl_s = 0;
  spec.labels = {{"name", "keyed"}};
  spec.request_id = "req-1";
  auto first = send_only<sandbox_info>(lc, create_atom::value, spec);
  auto retry = send_only<sandbox_info>(lc, create_atom::value, spec);
  drive();
  REQUIRE(first->has_value());
  REQUIRE(retry->has_value());
  REQUIRE((*first)->ok());
  REQUIRE((*retry)->ok());
  CHECK((**first)->id == (**retry)->id);
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{})
          ->size() == 2);
  CHECK(of("idle-a").reclaims == 1);
}
