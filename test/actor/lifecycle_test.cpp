// Deterministic actor tests: the lifecycle and sandbox actors over a fake
// backend and fake layers, on CAF's test coordinator, with a worker pool that
// runs only when the test drives it. No sleeps, no threads, no root.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/lifecycle.hpp"
#include "actors/wire_types.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"
#include "core/json_codec.hpp"
#include "core/spec_fields.hpp"
#include "sys/fs.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// What the fakes saw, shared with the test.
struct world {
  int creates = 0;
  int destroys = 0;
  int held = 0; // layer mounts currently held
  int cancels = 0;
  int pauses = 0;
  int resumes = 0;
  bool fail_create = false;
  bool fail_resume = false;
  bool no_dir = false; // the fake backend makes no sandbox dir: keeping the record fails
  int64_t cpu_ns = 0;  // what usage() reports as the CPU time used
  std::vector<std::function<void(std::string)>> exit_hooks;
};

class fake_sandbox final : public backends::sandbox {
 public:
  /// `dir`: the sandbox dir the fake backend made (removed by destroy).
  explicit fake_sandbox(std::shared_ptr<world> w, std::string dir = {})
    : w_(std::move(w)), dir_(std::move(dir)) {}
  uint64_t exec(exec_request req, backends::exec_callbacks cb) override {
    if (req.argv.size() == 1 && req.argv[0] == "hang") { // finishes only when cancelled
      hung_[++next_] = std::move(cb);
      return next_;
    }
    if (destroyed_ || paused_) { // a frozen sandbox runs nothing
      cb.on_done(unavailable(destroyed_ ? "gone" : "frozen"));
      return 0;
    }
    exec_result r;
    for (auto& a : req.argv)
      r.stdout_data += a + " ";
    if (cb.on_output)
      cb.on_output(exec_chunk{1, r.stdout_data});
    cb.on_done(r);
    return ++next_;
  }
  void cancel(uint64_t exec_id) override {
    auto it = hung_.find(exec_id);
    if (it == hung_.end())
      return;
    exec_result r;
    r.exit_code = 137;
    auto cb = std::move(it->second);
    hung_.erase(it);
    ++w_->cancels;
    cb.on_done(r);
  }
  status write_file(const std::string& path, std::string_view data, uint32_t) override {
    if (paused_)
      return unavailable("frozen");
    files_[path] = std::string{data};
    return {};
  }
  expected<std::string> read_file(const std::string& path, size_t) override {
    if (paused_)
      return unavailable("frozen");
    auto it = files_.find(path);
    if (it == files_.end())
      return not_found("no " + path);
    return it->second;
  }
  void on_exit(std::function<void(std::string)> f) override { w_->exit_hooks.push_back(f); }
  status destroy() override {
    if (!destroyed_) {
      destroyed_ = true;
      ++w_->destroys;
      if (!dir_.empty())
        return sys::remove_tree(dir_);
    }
    return {};
  }
  int init_pid() const override { return 1; }
  status pause() override {
    paused_ = true;
    ++w_->pauses;
    return {};
  }
  status resume() override {
    if (w_->fail_resume)
      return internal_error("thaw freezer: EIO");
    paused_ = false;
    ++w_->resumes;
    return {};
  }
  status set_network(const network_policy&) override {
    return paused_ ? status{unavailable("frozen")} : status{};
  }
  expected<usage_sample> usage() override {
    usage_sample u;
    u.resident_bytes = 64 << 20;
    u.cpu_ns = w_->cpu_ns;
    return u;
  }

 private:
  std::shared_ptr<world> w_;
  std::string dir_;
  bool paused_ = false;
  std::map<std::string, std::string> files_;
  std::map<uint64_t, backends::exec_callbacks> hung_;
  uint64_t next_ = 0;
  bool destroyed_ = false;
};

class fake_backend final : public backends::backend {
 public:
  explicit fake_backend(std::shared_ptr<world> w) : w_(std::move(w)) {}
  std::string_view name() const override { return "container"; }
  expected<std::shared_ptr<backends::sandbox>> create(const backends::create_params& p) override {
    if (w_->fail_create)
      return internal_error("clone " + p.id + ": EPERM");
    ++w_->creates;
    if (w_->no_dir)
      return std::shared_ptr<backends::sandbox>{std::make_shared<fake_sandbox>(w_)};
    if (auto st = sys::make_dirs(p.dir, 0700); !st) // where the node keeps the record
      return st.err();
    return std::shared_ptr<backends::sandbox>{std::make_shared<fake_sandbox>(w_, p.dir)};
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
  explicit fake_layers(std::shared_ptr<world> w) : w_(std::move(w)) {}
  expected<held_layers> acquire(const std::vector<std::string>& refs) override {
    held_layers h;
    for (auto& r : refs) {
      if (r.rfind("missing", 0) == 0)
        return not_found("layer " + r + " not found");
      h.dirs.push_back("/mnt/" + r);
      h.digests.push_back("sha256:" + r);
    }
    w_->held += static_cast<int>(refs.size());
    return h;
  }
  void release(const std::vector<std::string>& digests) override {
    w_->held -= static_cast<int>(digests.size());
  }
  expected<std::vector<layer_info>> list() override {
    layer_info l;
    l.ref = "base/busybox@1";
    return std::vector<layer_info>{l};
  }

 private:
  std::shared_ptr<world> w_;
};

struct fixture : test::coordinated_system {
  std::shared_ptr<world> w = std::make_shared<world>();
  node_context_ptr ctx = std::make_shared<node_context>();
  lifecycle_actor lc;

  fixture() {
    ctx->config.node_id = "n-test";
    char tmpl[] = "/tmp/dsec-actor-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    ctx->config.state_dir = tmpl;
    ctx->config.max_sandboxes = 3;
    ctx->container = std::make_shared<fake_backend>(w);
    ctx->layers = std::make_shared<fake_layers>(w);
    ctx->pool = std::make_shared<sys::worker_pool>(0);
    lc = sys->spawn(lifecycle_behavior, ctx);
    drive();
  }

  ~fixture() {
    ask<bool>(shutdown_atom::value);
    caf::anon_send_exit(lc, caf::exit_reason::user_shutdown);
    drive();
    (void)sys::remove_tree(ctx->config.state_dir);
  }

  /// A new lifecycle actor on the same context, as after a node restart: it
  /// adopts whatever ctx->recovered holds. The old one must hold nothing.
  void restart_lifecycle() {
    caf::anon_send_exit(lc, caf::exit_reason::user_shutdown);
    drive();
    lc = sys->spawn(lifecycle_behavior, ctx);
    drive();
  }

  void drive() {
    for (;;) {
      auto n = sched->run() + ctx->pool->run_pending();
      if (n == 0)
        return;
    }
  }

  /// Sends `xs` to the lifecycle actor without driving; the answer lands in
  /// the returned slot once the test drives.
  template <class T, class... Ts>
  test::reply_slot<T> send_only(Ts... xs) {
    return test::send_only<T>(*sys, lc, xs...);
  }

  template <class T, class... Ts>
  expected<T> ask(Ts... xs) {
    auto out = send_only<T>(xs...);
    drive();
    REQUIRE(out->has_value());
    return std::move(**out);
  }

  sandbox_spec spec(std::vector<std::string> layers = {"base/busybox@1"}) {
    sandbox_spec s;
    s.layers = std::move(layers);
    s.ttl_s = 0;
    return s;
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "create, get, list by label, exec, files, destroy", "[actor]") {
  auto s = spec();
  s.labels = {{"job", "a"}};
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  CHECK(a->state == sandbox_state::running);
  CHECK(a->node == "n-test");
  CHECK(a->id.rfind("n-test.", 0) == 0);
  auto b = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(b.ok());
  CHECK(w->held == 2);

  auto got = ask<sandbox_info>(info_atom::value, a->id);
  REQUIRE(got.ok());
  CHECK(got->labels.at("job") == "a");
  auto all = ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{});
  CHECK(all->size() == 2);
  auto some = ask<std::vector<sandbox_info>>(list_atom::value,
                                             std::map<std::string, std::string>{{"job", "a"}});
  REQUIRE(some->size() == 1);
  CHECK(some->front().id == a->id);

  exec_request req;
  req.argv = {"echo", "hi"};
  auto r = ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  REQUIRE(r.ok());
  CHECK(r->stdout_data == "echo hi ");
  CHECK(ask<bool>(wfile_atom::value, a->id, std::string{"/a"}, std::string{"data"}).ok());
  auto f = ask<std::string>(rfile_atom::value, a->id, std::string{"/a"}, uint64_t{100});
  REQUIRE(f.ok());
  CHECK(*f == "data");

  auto d1 = ask<bool>(destroy_atom::value, a->id);
  REQUIRE(d1.ok());
  CHECK(*d1);
  auto d2 = ask<bool>(destroy_atom::value, a->id);
  REQUIRE(d2.ok());
  CHECK_FALSE(*d2); // idempotent
  CHECK(w->destroys == 1);
  CHECK(w->held == 1);
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
}

TEST_CASE_METHOD(fixture, "failed creates leave nothing held", "[actor]") {
  auto e1 = ask<sandbox_info>(create_atom::value, spec({"base/busybox@1", "missing/x@1"}));
  REQUIRE_FALSE(e1.ok());
  CHECK(e1.err().code == errc::not_found);
  w->fail_create = true;
  auto e2 = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE_FALSE(e2.ok());
  CHECK(e2.err().message.find("EPERM") != std::string::npos);
  CHECK(w->held == 0);
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{})
          ->empty());
  auto st = ask<node_status>(status_atom::value);
  REQUIRE(st.ok());
  CHECK(st->create_failures_total == 2);
  CHECK(st->creates_total == 0);
  CHECK(st->sandboxes == 0);
}

TEST_CASE_METHOD(fixture, "admission: capacity, backend, network, pinning", "[actor]") {
  auto s = spec();
  s.backend = "microvm";
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::invalid_argument);
  s = spec();
  s.network.allow = {"pypi.org"}; // no port: refused before the backend sees it
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::invalid_argument);
  s = spec();
  s.node = "n-other";
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::not_found);
  for (int i = 0; i < 3; ++i)
    REQUIRE(ask<sandbox_info>(create_atom::value, spec()).ok());
  CHECK(ask<sandbox_info>(create_atom::value, spec()).err().code == errc::resource_exhausted);
}

TEST_CASE_METHOD(fixture, "request_id: same spec same sandbox, other spec conflict", "[actor]") {
  auto s = spec();
  s.request_id = "job-7-step-3";
  auto a = ask<sandbox_info>(create_atom::value, s);
  auto b = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->id == b->id);
  CHECK(w->creates == 1);
  s.memory_mb = 1024;
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::conflict);
}

TEST_CASE_METHOD(fixture, "bad and unknown ids", "[actor]") {
  exec_request req;
  req.argv = {"true"};
  CHECK(ask<exec_result>(exec_atom::value, std::string{"../etc"}, req, uint64_t{1}).err().code
        == errc::invalid_argument);
  CHECK(ask<exec_result>(exec_atom::value, std::string{"n-test.zzz"}, req, uint64_t{1}).err().code
        == errc::not_found);
  CHECK(ask<bool>(destroy_atom::value, std::string{"n-test.zzz"}).ok());
}

TEST_CASE_METHOD(fixture, "native callers: specs and execs are validated without JSON",
                 "[actor]") {
  auto s = spec();
  s.memory_mb = 1;
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::invalid_argument);
  s = spec({});
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::invalid_argument);
  s = spec();
  s.env = {{"A=B", "x"}};
  CHECK(ask<sandbox_info>(create_atom::value, s).err().code == errc::invalid_argument);
  CHECK(w->creates == 0);
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  exec_request req;
  CHECK(ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0}).err().code
        == errc::invalid_argument); // empty argv
  req.argv = {"true"};
  req.cwd = "relative";
  CHECK(ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0}).err().code
        == errc::invalid_argument);
}

TEST_CASE_METHOD(fixture, "remote streaming: chunks reach the sink actor before the answer",
                 "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  auto events = std::make_shared<std::vector<std::string>>();
  auto sink = sys->spawn([events](caf::event_based_actor*) -> caf::behavior {
    return {[events](stream_atom, uint64_t token, exec_chunk& c) {
      events->push_back(std::to_string(token) + ":" + c.data);
    }};
  });
  exec_request req;
  req.argv = {"echo", "hi"};
  auto r = ask<exec_result>(stream_atom::value, a->id, req, sink, uint64_t{42});
  REQUIRE(r.ok());
  drive();
  REQUIRE(events->size() == 1);
  CHECK(events->front() == "42:echo hi ");
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(fixture, "files: writes past the node limit are refused",
                 "[actor]") {
  ctx->config.max_file_bytes = 8;
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  CHECK(ask<bool>(wfile_atom::value, a->id, std::string{"/a"}, std::string(9, 'x')).err().code
        == errc::too_large);
  CHECK(ask<bool>(wfile_atom::value, a->id, std::string{"/a"}, std::string(8, 'x')).ok());
}

TEST_CASE_METHOD(fixture, "ttl destroys the sandbox", "[actor]") {
  auto s = spec();
  s.ttl_s = 5;
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  CHECK(a->expires_at_ms == a->created_at_ms + 5000);
  sched->advance_time(std::chrono::seconds(4));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).ok());
  sched->advance_time(std::chrono::seconds(2));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
  CHECK(w->destroys == 1);
  CHECK(w->held == 0);
}

TEST_CASE_METHOD(fixture, "a sandbox that dies is failed with its reason", "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  REQUIRE(w->exit_hooks.size() == 1);
  w->exit_hooks[0]("oom");
  drive();
  auto info = ask<sandbox_info>(info_atom::value, a->id);
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::failed);
  CHECK(info->reason == "oom");
  CHECK(w->held == 0); // released at once
  exec_request req;
  req.argv = {"true"};
  auto r = ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("oom") != std::string::npos);
  CHECK(ask<bool>(destroy_atom::value, a->id).ok());
}

TEST_CASE_METHOD(fixture, "cancel by token kills only that exec", "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  exec_request hang;
  hang.argv = {"hang"};
  auto out = std::make_shared<std::optional<expected<exec_result>>>();
  auto dest = lc;
  auto id = a->id;
  sys->spawn([=](caf::event_based_actor* self) {
    self->request(dest, caf::infinite, exec_atom::value, id, hang, uint64_t{42})
      .then([=](exec_result& x) { out->emplace(std::move(x)); },
            [=](caf::error& e) { out->emplace(from_caf(e)); });
  });
  drive();
  CHECK_FALSE(out->has_value()); // still running
  caf::anon_send(lc, cancel_atom::value, id, uint64_t{7}); // someone else's token
  drive();
  CHECK_FALSE(out->has_value());
  caf::anon_send(lc, cancel_atom::value, id, uint64_t{42});
  drive();
  REQUIRE(out->has_value());
  REQUIRE((*out)->ok());
  CHECK((**out)->exit_code == 137);
  CHECK(w->cancels == 1);
}

TEST_CASE_METHOD(fixture, "shutdown destroys every sandbox", "[actor]") {
  for (int i = 0; i < 3; ++i)
    REQUIRE(ask<sandbox_info>(create_atom::value, spec()).ok());
  CHECK(ask<bool>(shutdown_atom::value).ok());
  CHECK(w->destroys == 3);
  CHECK(w->held == 0);
  CHECK(ask<sandbox_info>(create_atom::value, spec()).err().code == errc::unavailable);
}

namespace {

int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

/// A sandbox as the node hands it over after a restart; its layer mount is
/// counted in w->held, as retake_mounts would.
recovered_sandbox recovered(fixture& f, const std::string& id, int64_t created_at_ms,
                            int64_t expires_at_ms) {
  recovered_sandbox r;
  r.id = id;
  r.spec = f.spec();
  r.spec.labels = {{"job", "r"}};
  r.created_at_ms = created_at_ms;
  r.expires_at_ms = expires_at_ms;
  r.sb = std::make_shared<fake_sandbox>(f.w);
  r.digests = {"sha256:base/busybox@1"};
  ++f.w->held;
  return r;
}

} // namespace

TEST_CASE_METHOD(fixture, "a running sandbox keeps a record a restarted node reads",
                 "[actor][restart]") {
  auto s = spec();
  s.ttl_s = 60;
  s.labels = {{"job", "a"}};
  s.request_id = "rq-9";
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  auto text = sys::read_file(ctx->record_path(a->id));
  REQUIRE(text.ok());
  auto rec = json_codec::decode_record(*text);
  REQUIRE(rec.ok());
  CHECK(rec->id == a->id);
  CHECK(same_request(rec->spec, s));
  CHECK(rec->created_at_ms == a->created_at_ms);
  CHECK(rec->expires_at_ms == a->expires_at_ms);
  CHECK(rec->digests == std::vector<std::string>{"sha256:base/busybox@1"});
  REQUIRE(ask<bool>(destroy_atom::value, a->id).ok());
  CHECK_FALSE(sys::exists(ctx->sandbox_dir(a->id)));
}

TEST_CASE_METHOD(fixture, "a create that cannot keep its record fails and holds nothing",
                 "[actor][restart]") {
  w->no_dir = true;
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE_FALSE(a.ok());
  CHECK(a.err().message.find("record.json") != std::string::npos);
  CHECK(w->creates == 1);
  CHECK(w->destroys == 1);
  CHECK(w->held == 0);
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{})
          ->empty());
}

TEST_CASE_METHOD(fixture, "adopted sandboxes: listed, exec, files, request_id, remaining TTL",
                 "[actor][restart]") {
  auto now = wall_ms();
  auto a = recovered(*this, "n-test.aaa", now - 10000, now + 3000); // 3 s left
  a.spec.ttl_s = 13;
  a.spec.request_id = "rq-1";
  auto expired = recovered(*this, "n-test.bbb", now - 20000, now - 1000);
  auto forever = recovered(*this, "n-test.ccc", now - 5000, 0);
  auto a_spec = a.spec;
  ctx->recovered = {a, expired, forever};
  restart_lifecycle();
  CHECK(ctx->recovered.empty());

  // The expired one is destroyed at once and releases its mount.
  CHECK(ask<sandbox_info>(info_atom::value, std::string{"n-test.bbb"}).err().code
        == errc::not_found);
  CHECK(w->destroys == 1);
  CHECK(w->held == 2);
  auto all = ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{});
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].id == "n-test.aaa"); // oldest first
  CHECK((*all)[1].id == "n-test.ccc");
  auto info = ask<sandbox_info>(info_atom::value, std::string{"n-test.aaa"});
  REQUIRE(info.ok());
  CHECK(info->state == sandbox_state::running);
  CHECK(info->node == "n-test");
  CHECK(info->labels.at("job") == "r");
  CHECK(info->created_at_ms == now - 10000);
  CHECK(info->expires_at_ms == now + 3000);
  auto by_label = ask<std::vector<sandbox_info>>(
    list_atom::value, std::map<std::string, std::string>{{"job", "r"}});
  CHECK(by_label->size() == 2);

  exec_request req;
  req.argv = {"echo", "back"};
  auto r = ask<exec_result>(exec_atom::value, std::string{"n-test.aaa"}, req, uint64_t{0});
  REQUIRE(r.ok());
  CHECK(r->stdout_data == "echo back ");
  CHECK(ask<bool>(wfile_atom::value, std::string{"n-test.aaa"}, std::string{"/f"},
                  std::string{"kept"})
          .ok());
  auto f = ask<std::string>(rfile_atom::value, std::string{"n-test.aaa"}, std::string{"/f"},
                            uint64_t{100});
  REQUIRE(f.ok());
  CHECK(*f == "kept");

  // The idempotency key still names the adopted sandbox.
  auto again = ask<sandbox_info>(create_atom::value, a_spec);
  REQUIRE(again.ok());
  CHECK(again->id == "n-test.aaa");
  CHECK(w->creates == 0);
  a_spec.memory_mb = 1024;
  CHECK(ask<sandbox_info>(create_atom::value, a_spec).err().code == errc::conflict);

  // The TTL fires at the time left, not a whole ttl_s after the restart.
  sched->advance_time(std::chrono::seconds(2));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, std::string{"n-test.aaa"}).ok());
  sched->advance_time(std::chrono::seconds(2));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, std::string{"n-test.aaa"}).err().code
        == errc::not_found);
  CHECK(w->destroys == 2);
  CHECK(w->held == 1);

  // The one without a TTL stays until destroyed, then holds nothing.
  sched->advance_time(std::chrono::hours(24));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, std::string{"n-test.ccc"}).ok());
  auto d = ask<bool>(destroy_atom::value, std::string{"n-test.ccc"});
  REQUIRE(d.ok());
  CHECK(*d);
  CHECK(w->destroys == 3);
  CHECK(w->held == 0);
  auto st = ask<node_status>(status_atom::value);
  REQUIRE(st.ok());
  CHECK(st->destroys_total == 3);
  CHECK(st->creates_total == 0);
}

TEST_CASE_METHOD(fixture, "an adopted sandbox that dies is failed; shutdown destroys adopted ones",
                 "[actor][restart]") {
  auto now = wall_ms();
  ctx->recovered = {recovered(*this, "n-test.ddd", now, 0), recovered(*this, "n-test.eee", now, 0)};
  restart_lifecycle();
  REQUIRE(w->exit_hooks.size() == 2);
  w->exit_hooks[0]("init exited");
  drive();
  auto all = ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{});
  REQUIRE(all->size() == 2);
  int failed = 0;
  for (auto& i : *all)
    failed += i.state == sandbox_state::failed && i.reason == "init exited";
  CHECK(failed == 1);
  CHECK(w->held == 1);
  CHECK(ask<bool>(shutdown_atom::value).ok());
  CHECK(w->held == 0);
  CHECK(w->destroys == 2);
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{})
          ->empty());
}

namespace {

template <class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(x));
  T y;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(source(y));
  return y;
}

} // namespace

TEST_CASE_METHOD(fixture, "wire types survive serialization", "[actor][wire]") {
  auto s = spec({"a@1", "b@2"});
  s.cpu = 0.25;
  s.labels = {{"k", "v"}};
  s.network.allow = {"1.2.3.4:80"};
  s.protect.hidden = {"/x"};
  auto s2 = round_trip(*sys, s);
  CHECK(same_request(s, s2));
  exec_request r;
  r.argv = {"a", "b"};
  r.stdin_data = std::string("\0\1", 2);
  r.timeout_s = 1.5;
  auto r2 = round_trip(*sys, r);
  CHECK(r2.argv == r.argv);
  CHECK(r2.stdin_data == r.stdin_data);
  CHECK(r2.timeout_s == 1.5);
  exec_result e;
  e.exit_code = 137;
  e.timed_out = true;
  e.node_ms = 2.5;
  e.stdout_data = "o";
  auto e2 = round_trip(*sys, e);
  CHECK(e2.exit_code == 137);
  CHECK(e2.timed_out);
  CHECK(e2.node_ms == 2.5);
  sandbox_info i;
  i.id = "n.x";
  i.state = sandbox_state::failed;
  i.reason = "oom";
  auto i2 = round_trip(*sys, i);
  CHECK(i2.state == sandbox_state::failed);
  CHECK(i2.reason == "oom");
  layer_info l;
  l.digest = "sha256:ab";
  CHECK(round_trip(*sys, l).digest == l.digest);
  node_status n;
  n.sandboxes = 7;
  n.backends = {{"microvm", true, "", "tcg", "no /dev/kvm"}, {"vm", false, "why", "kvm", "x"}};
  auto n2 = round_trip(*sys, n);
  CHECK(n2.sandboxes == 7);
  REQUIRE(n2.backends.size() == 2);
  CHECK(n2.backends[0].name == "microvm");
  CHECK(n2.backends[0].available);
  CHECK(n2.backends[0].accel == "tcg");
  CHECK(n2.backends[0].accel_reason == "no /dev/kvm");
  CHECK_FALSE(n2.backends[1].available);
  CHECK(n2.backends[1].reason == "why");
  sandbox_metric m;
  m.timestamp_ms = 1'700'000'000'000;
  m.cpu_count = 2;
  m.cpu_used_pct = 37.5;
  m.mem_used = 1 << 20;
  m.mem_total = 512 << 20;
  auto m2 = round_trip(*sys, m);
  CHECK(m2.timestamp_ms == m.timestamp_ms);
  CHECK(m2.cpu_count == 2);
  CHECK(m2.cpu_used_pct == 37.5);
  CHECK(m2.mem_used == m.mem_used);
  CHECK(m2.mem_total == m.mem_total);
  auto err = from_caf(to_caf(error{errc::conflict, "request_id reused"}));
  CHECK(err.code == errc::conflict);
  CHECK(err.message == "request_id reused");
}

TEST_CASE_METHOD(fixture, "transparent resume: calls on a paused sandbox resume it first",
                 "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  auto paused = ask<sandbox_info>(pause_atom::value, a->id);
  REQUIRE(paused.ok());
  CHECK(paused->state == sandbox_state::paused);
  exec_request req;
  req.argv = {"echo", "back"};
  auto r = ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  REQUIRE(r.ok());
  CHECK(r->stdout_data == "echo back ");
  CHECK(w->resumes == 1);
  CHECK(ask<sandbox_info>(info_atom::value, a->id)->state == sandbox_state::running);

  // Files and network changes too.
  REQUIRE(ask<sandbox_info>(pause_atom::value, a->id).ok());
  CHECK(ask<bool>(wfile_atom::value, a->id, std::string{"/f"}, std::string{"x"}).ok());
  CHECK(w->resumes == 2);
  REQUIRE(ask<sandbox_info>(pause_atom::value, a->id).ok());
  auto f = ask<std::string>(rfile_atom::value, a->id, std::string{"/f"}, uint64_t{10});
  REQUIRE(f.ok());
  CHECK(*f == "x");
  REQUIRE(ask<sandbox_info>(pause_atom::value, a->id).ok());
  CHECK(ask<bool>(network_atom::value, a->id, network_policy{}).ok());
  CHECK(w->resumes == 4);
  // The lifecycle's table says running again (list answers from it).
  auto all = ask<std::vector<sandbox_info>>(list_atom::value, std::map<std::string, std::string>{});
  REQUIRE(all->size() == 1);
  CHECK(all->front().state == sandbox_state::running);
}

TEST_CASE_METHOD(fixture, "transparent resume: calls that come together share one resume",
                 "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  exec_request req;
  req.argv = {"true"};
  // A pause and three calls in flight at once: the calls wait for the pause,
  // then for one resume, and all run.
  auto p = send_only<sandbox_info>(pause_atom::value, a->id);
  auto e1 = send_only<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  auto e2 = send_only<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  auto wr = send_only<bool>(wfile_atom::value, a->id, std::string{"/g"}, std::string{"y"});
  auto rs = send_only<sandbox_info>(resume_atom::value, a->id);
  drive();
  REQUIRE(p->has_value());
  CHECK(p->value().ok());
  for (auto* e : {&e1, &e2}) {
    REQUIRE((*e)->has_value());
    CHECK((*e)->value().ok());
  }
  REQUIRE(wr->has_value());
  CHECK(wr->value().ok());
  REQUIRE(rs->has_value());
  REQUIRE(rs->value().ok());
  CHECK(rs->value()->state == sandbox_state::running);
  CHECK(w->pauses == 1);
  CHECK(w->resumes == 1);
}

TEST_CASE_METHOD(fixture, "transparent resume: a failed resume answers the call with its cause",
                 "[actor]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  REQUIRE(ask<sandbox_info>(pause_atom::value, a->id).ok());
  w->fail_resume = true;
  exec_request req;
  req.argv = {"true"};
  auto r = ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().message.find("resume " + a->id) != std::string::npos);
  CHECK(r.err().message.find("EIO") != std::string::npos);
  CHECK(ask<sandbox_info>(info_atom::value, a->id)->state == sandbox_state::paused);
  // Destroy still works and answers calls that wait.
  w->fail_resume = false;
  CHECK(ask<bool>(destroy_atom::value, a->id).ok());
  CHECK(w->destroys == 1);
}

// -- TTL over pauses and job-level pause (actors/sandbox_ttl.hpp, job_ops.hpp) --

TEST_CASE_METHOD(fixture, "the ttl stands still while paused and goes on after resume",
                 "[actor][ttl]") {
  auto s = spec();
  s.ttl_s = 5;
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  auto p = ask<sandbox_info>(pause_atom::value, a->id);
  REQUIRE(p.ok());
  CHECK(p->expires_at_ms == 0);
  CHECK(p->ttl_left_ms > 4000);
  CHECK(p->ttl_left_ms <= 5000);
  CHECK(p->paused_expires_at_ms > 0);
  // Past the whole TTL while paused: the timer armed at create is stale.
  sched->advance_time(std::chrono::seconds(30));
  drive();
  auto still = ask<sandbox_info>(info_atom::value, a->id);
  REQUIRE(still.ok());
  CHECK(still->state == sandbox_state::paused);
  CHECK(w->destroys == 0);
  auto r = ask<sandbox_info>(resume_atom::value, a->id);
  REQUIRE(r.ok());
  CHECK(r->expires_at_ms > 0);
  CHECK(r->ttl_left_ms == 0);
  CHECK(r->paused_expires_at_ms == 0);
  sched->advance_time(std::chrono::milliseconds(p->ttl_left_ms - 500));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).ok());
  sched->advance_time(std::chrono::seconds(2));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
  CHECK(w->destroys == 1);
  CHECK(w->held == 0);
}

TEST_CASE_METHOD(fixture, "a sandbox paused past paused_ttl_s is destroyed", "[actor][ttl]") {
  auto s = spec();
  s.paused_ttl_s = 3;
  auto a = ask<sandbox_info>(create_atom::value, s);
  auto b = ask<sandbox_info>(create_atom::value, spec()); // default: a day
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(ask<sandbox_info>(pause_atom::value, a->id).ok());
  REQUIRE(ask<sandbox_info>(pause_atom::value, b->id).ok());
  sched->advance_time(std::chrono::seconds(4));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
  CHECK(ask<sandbox_info>(info_atom::value, b->id)->state == sandbox_state::paused);
  CHECK(w->destroys == 1);
  // A resumed one is not destroyed by its old paused deadline.
  auto c = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(c.ok());
  REQUIRE(ask<sandbox_info>(pause_atom::value, c->id).ok());
  REQUIRE(ask<sandbox_info>(resume_atom::value, c->id).ok());
  sched->advance_time(std::chrono::seconds(10));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, c->id)->state == sandbox_state::running);
}

TEST_CASE_METHOD(fixture, "job pause and resume act on every matching sandbox, idempotently",
                 "[actor][job]") {
  using lbl = std::map<std::string, std::string>;
  auto s = spec();
  s.labels = {{"job", "g7"}};
  auto a = ask<sandbox_info>(create_atom::value, s);
  auto b = ask<sandbox_info>(create_atom::value, s);
  auto other = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE((a.ok() && b.ok() && other.ok()));
  auto r = ask<job_result>(job_atom::value, lbl{{"job", "g7"}}, true);
  REQUIRE(r.ok());
  std::vector<std::string> both{a->id, b->id};
  std::sort(both.begin(), both.end());
  std::sort(r->done.begin(), r->done.end());
  CHECK(r->done == both);
  CHECK(r->errors.empty());
  CHECK(w->pauses == 2);
  CHECK(ask<sandbox_info>(info_atom::value, other->id)->state == sandbox_state::running);
  auto again = ask<job_result>(job_atom::value, lbl{{"job", "g7"}}, true);
  REQUIRE(again.ok());
  CHECK(again->done.size() == 2);
  CHECK(w->pauses == 2); // already paused: done without pausing again
  // A sandbox that died is an error item naming it; the rest is done.
  REQUIRE(w->exit_hooks.size() == 3);
  auto res = ask<job_result>(job_atom::value, lbl{{"job", "g7"}}, false);
  REQUIRE(res.ok());
  CHECK(res->done.size() == 2);
  w->exit_hooks[0]("init exited (killed by signal 9)");
  drive();
  auto p2 = ask<job_result>(job_atom::value, lbl{{"job", "g7"}}, true);
  REQUIRE(p2.ok());
  CHECK(p2->done == std::vector<std::string>{b->id});
  REQUIRE(p2->errors.size() == 1);
  CHECK(p2->errors[0].id == a->id);
  CHECK(p2->errors[0].node == "n-test");
  CHECK(p2->errors[0].code == errc::unavailable);
  // No selector, no action.
  CHECK(ask<job_result>(job_atom::value, lbl{}, true).err().code == errc::invalid_argument);
  CHECK(ask<job_result>(job_atom::value, lbl{{"job", "none"}}, true)->done.empty());
}

TEST_CASE_METHOD(fixture, "setttl moves the end of a sandbox from now", "[actor][e2b]") {
  auto s = spec();
  s.ttl_s = 5;
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  sched->advance_time(std::chrono::seconds(1));
  drive();
  auto moved = ask<sandbox_info>(setttl_atom::value, a->id, int64_t{60});
  REQUIRE(moved.ok());
  CHECK(moved->expires_at_ms > a->expires_at_ms);
  // The first timer fires and is ignored.
  sched->advance_time(std::chrono::seconds(10));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).ok());
  sched->advance_time(std::chrono::seconds(55));
  drive();
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
  CHECK(ask<sandbox_info>(setttl_atom::value, a->id, int64_t{5}).err().code == errc::not_found);
  auto b = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(b.ok());
  CHECK(ask<sandbox_info>(setttl_atom::value, b->id, int64_t{-1}).err().code
        == errc::invalid_argument);
}

TEST_CASE_METHOD(fixture, "a sandbox actor that exits abnormally leaves a failed row",
                 "[actor][supervision]") {
  auto s = spec();
  s.request_id = "req-1";
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  auto b = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(b.ok());
  auto targets = ask<std::vector<reclaim_target>>(usage_atom::value);
  REQUIRE(targets.ok());
  auto it = std::find_if(targets->begin(), targets->end(),
                         [&](const reclaim_target& t) { return t.id == a->id; });
  REQUIRE(it != targets->end());
  auto held_before = w->held;
  caf::anon_send_exit(it->actor, caf::exit_reason::kill);
  drive();
  // What it held is released all the same: its backend sandbox and mounts.
  CHECK(w->destroys == 1);
  CHECK(w->held < held_before);

  // Listed as failed with the exit reason; the other sandbox is untouched.
  auto all = ask<std::vector<sandbox_info>>(list_atom::value, label_map{});
  REQUIRE(all->size() == 2);
  for (auto& i : *all) {
    if (i.id == a->id) {
      CHECK(i.state == sandbox_state::failed);
      CHECK(i.reason.find("sandbox actor exited") != std::string::npos);
    } else {
      CHECK(i.state == sandbox_state::running);
    }
  }
  auto got = ask<sandbox_info>(info_atom::value, a->id);
  REQUIRE(got.ok());
  CHECK(got->state == sandbox_state::failed);
  // Calls on it fail at once, naming the cause.
  exec_request req;
  req.argv = {"true"};
  auto r = ask<exec_result>(exec_atom::value, a->id, req, uint64_t{0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::unavailable);
  CHECK(r.err().message.find("failed") != std::string::npos);
  CHECK(ask<exec_result>(exec_atom::value, b->id, req, uint64_t{0}).ok());

  // Its request_id is free: the same key makes a new sandbox.
  auto again = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(again.ok());
  CHECK(again->id != a->id);
  CHECK(again->state == sandbox_state::running);

  // destroy removes the row, once; the new sandbox keeps its key.
  CHECK(*ask<bool>(destroy_atom::value, a->id));
  CHECK_FALSE(*ask<bool>(destroy_atom::value, a->id));
  CHECK(ask<sandbox_info>(info_atom::value, a->id).err().code == errc::not_found);
  auto same = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(same.ok());
  CHECK(same->id == again->id);
}

TEST_CASE_METHOD(fixture, "a destroyed sandbox's normal exit changes nothing",
                 "[actor][supervision]") {
  auto a = ask<sandbox_info>(create_atom::value, spec());
  REQUIRE(a.ok());
  CHECK(*ask<bool>(destroy_atom::value, a->id));
  drive();
  CHECK(ask<std::vector<sandbox_info>>(list_atom::value, label_map{})->empty());
  CHECK(ask<node_status>(status_atom::value)->destroys_total == 1);
}

TEST_CASE_METHOD(fixture, "metrics: CPU since the last sample and memory of the sandbox",
                 "[actor][metrics]") {
  auto s = spec();
  s.cpu = 2;
  s.memory_mb = 256;
  auto a = ask<sandbox_info>(create_atom::value, s);
  REQUIRE(a.ok());
  auto m = ask<sandbox_metric>(sbmetrics_atom::value, a->id);
  REQUIRE(m.ok());
  CHECK(m->cpu_count == 2);
  CHECK(m->mem_used == 64 << 20);
  CHECK(m->mem_total == int64_t{256} << 20);
  CHECK(m->timestamp_ms >= a->created_at_ms);
  CHECK(m->cpu_used_pct >= 0);
  CHECK(m->cpu_used_pct <= 100);
  CHECK(ask<sandbox_metric>(sbmetrics_atom::value, std::string{"n-test.nope"}).err().code
        == errc::not_found);
}
