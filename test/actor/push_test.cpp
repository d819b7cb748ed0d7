// Deterministic actor tests of the push streams (issue 24 part 2): a
// background command's output reaches every follower's sink once, a late
// follower first gets what it missed in the order it was printed, the answer
// carries the exit status and no output, a follower whose sink goes down is
// dropped; a directory watch sends its ready chunk, then the backend's events,
// and a backend without watches is refused by name. The lifecycle and sandbox
// actors run over a fake backend whose commands print when the test says.
#include <catch2/catch.hpp>

#include <map>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/chunk_relay.hpp"
#include "actors/lifecycle.hpp"
#include "core/inspect.hpp"
#include "sys/fs.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// A watch the test fires events into.
struct fake_watch final : backends::dir_watch {
  backends::watch_callbacks cb;
  bool started = false;
  void start() override { started = true; }
};

/// What the fakes hold, shared with the test: running background commands
/// by pid (their callbacks), and the last watch.
struct world {
  std::map<int32_t, backends::exec_callbacks> running;
  std::shared_ptr<fake_watch> watch;
  bool can_watch = true;
};

class fake_sandbox final : public backends::sandbox {
 public:
  explicit fake_sandbox(std::shared_ptr<world> w) : w_(std::move(w)) {}
  uint64_t exec(exec_request, backends::exec_callbacks cb) override {
    auto pid = static_cast<int32_t>(100 + w_->running.size());
    cb.on_started(pid);
    w_->running[pid] = std::move(cb);
    return static_cast<uint64_t>(pid);
  }
  void cancel(uint64_t) override {}
  status write_file(const std::string&, std::string_view, uint32_t) override { return {}; }
  expected<std::string> read_file(const std::string&, size_t) override { return std::string{}; }
  void on_exit(std::function<void(std::string)>) override {}
  status destroy() override { return {}; }
  int init_pid() const override { return 1; }
  expected<std::shared_ptr<backends::dir_watch>> watch_dir(const std::string& path, bool,
                                                           backends::watch_callbacks cb) override {
    if (!w_->can_watch)
      return backends::sandbox::watch_dir(path, false, std::move(cb));
    w_->watch = std::make_shared<fake_watch>();
    w_->watch->cb = std::move(cb);
    return std::shared_ptr<backends::dir_watch>{w_->watch};
  }

 private:
  std::shared_ptr<world> w_;
};

class fake_backend final : public backends::backend {
 public:
  explicit fake_backend(std::shared_ptr<world> w) : w_(std::move(w)) {}
  std::string_view name() const override { return "container"; }
  expected<std::shared_ptr<backends::sandbox>> create(const backends::create_params& p) override {
    if (auto st = sys::make_dirs(p.dir, 0700); !st)
      return st.err();
    return std::shared_ptr<backends::sandbox>{std::make_shared<fake_sandbox>(w_)};
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

/// A sink that keeps "token:stream:data" of every chunk.
caf::actor spawn_sink(caf::actor_system& sys, std::shared_ptr<std::vector<std::string>> got) {
  return sys.spawn([got](caf::event_based_actor*) -> caf::behavior {
    return {[got](stream_atom, uint64_t token, exec_chunk& c) {
      got->push_back(std::to_string(token) + ":" + std::to_string(c.stream) + ":" + c.data);
    }};
  });
}

struct fixture : test::coordinated_system {
  std::shared_ptr<world> w = std::make_shared<world>();
  node_context_ptr ctx = std::make_shared<node_context>();
  lifecycle_actor lc;
  std::string id;

  fixture() {
    ctx->config.node_id = "n-push";
    char tmpl[] = "/tmp/dsec-push-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    ctx->config.state_dir = tmpl;
    ctx->container = std::make_shared<fake_backend>(w);
    ctx->layers = std::make_shared<fake_layers>();
    ctx->pool = std::make_shared<sys::worker_pool>(0);
    lc = sys->spawn(lifecycle_behavior, ctx);
    drive();
    sandbox_spec s;
    s.layers = {"base/busybox@1"};
    s.ttl_s = 0;
    auto info = ask<sandbox_info>(create_atom::value, s);
    REQUIRE(info.ok());
    id = info->id;
  }

  ~fixture() {
    ask<bool>(shutdown_atom::value);
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

  /// Starts a background command; its pid.
  int32_t start_bg() {
    exec_request req;
    req.argv = {"/bin/sh", "-c", "x"};
    auto p = ask<background_process>(bgexec_atom::value, id, req);
    REQUIRE(p.ok());
    return p->pid;
  }

  /// The backend reports output of `pid` (from its thread, in the fakes: now).
  void print(int32_t pid, int32_t stream, std::string data) {
    w->running.at(pid).on_output(exec_chunk{stream, std::move(data)});
    drive();
  }

  void finish(int32_t pid, int exit_code) {
    exec_result r;
    r.exit_code = exit_code;
    w->running.at(pid).on_done(r);
    drive();
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "followers get the output once, late ones what they missed first",
                 "[actor][push]") {
  auto pid = start_bg();
  print(pid, 1, "a\n");
  print(pid, 2, "b\n");
  auto early = std::make_shared<std::vector<std::string>>();
  auto s1 = spawn_sink(*sys, early);
  auto f1 = send_only<background_process>(follow_atom::value, id, pid, s1, uint64_t{1});
  drive();
  CHECK_FALSE(f1->has_value()); // answered only when the command ends
  print(pid, 1, "c\n");
  auto late = std::make_shared<std::vector<std::string>>();
  auto s2 = spawn_sink(*sys, late);
  auto f2 = send_only<background_process>(follow_atom::value, id, pid, s2, uint64_t{2});
  drive();
  print(pid, 1, "d\n");
  finish(pid, 5);
  std::vector<std::string> want1 = {"1:0:", "1:1:a\n", "1:2:b\n", "1:1:c\n", "1:1:d\n"};
  std::vector<std::string> want2 = {"2:0:", "2:1:a\n", "2:2:b\n", "2:1:c\n", "2:1:d\n"};
  CHECK(*early == want1);
  CHECK(*late == want2);
  for (auto& f : {f1, f2}) {
    REQUIRE(f->has_value());
    REQUIRE((*f)->ok());
    auto& p = ***f;
    CHECK_FALSE(p.running);
    CHECK(p.result.exit_code == 5);
    CHECK(p.result.stdout_data.empty()); // it went to the sink
    CHECK(p.result.stderr_data.empty());
  }
  // A poll still reads everything (the kept record is untouched).
  auto all = ask<background_process>(proc_atom::value, id, pid, int64_t{0});
  REQUIRE(all.ok());
  CHECK(all->result.stdout_data == "a\nc\nd\n");
  // Following a finished command replays it and answers at once.
  auto after = std::make_shared<std::vector<std::string>>();
  auto s3 = spawn_sink(*sys, after);
  auto f3 = ask<background_process>(follow_atom::value, id, pid, s3, uint64_t{3});
  REQUIRE(f3.ok());
  CHECK(f3->result.exit_code == 5);
  // Replayed as printed; adjacent output of one stream comes as one chunk.
  std::vector<std::string> want3 = {"3:0:", "3:1:a\n", "3:2:b\n", "3:1:c\nd\n"};
  CHECK(*after == want3);
  for (auto& s : {s1, s2, s3})
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  drive();
}

TEST_CASE_METHOD(fixture, "a follower whose sink goes down is answered and dropped",
                 "[actor][push]") {
  auto pid = start_bg();
  auto got = std::make_shared<std::vector<std::string>>();
  auto sink = spawn_sink(*sys, got);
  auto f = send_only<background_process>(follow_atom::value, id, pid, sink, uint64_t{7});
  drive();
  print(pid, 1, "x\n");
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  drive();
  REQUIRE(f->has_value());
  REQUIRE((*f)->ok());
  CHECK((**f)->running); // as it stands: the command goes on
  print(pid, 1, "y\n"); // nobody to send it to; kept
  finish(pid, 0);
  auto all = ask<background_process>(proc_atom::value, id, pid, int64_t{0});
  REQUIRE(all.ok());
  CHECK(all->result.stdout_data == "x\ny\n");
}

TEST_CASE_METHOD(fixture, "follow of an unknown pid is not_found", "[actor][push]") {
  auto got = std::make_shared<std::vector<std::string>>();
  auto sink = spawn_sink(*sys, got);
  auto f = ask<background_process>(follow_atom::value, id, int32_t{4242}, sink, uint64_t{1});
  REQUIRE_FALSE(f.ok());
  CHECK(f.err().code == errc::not_found);
  CHECK(got->empty());
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  drive();
}

TEST_CASE_METHOD(fixture, "a watch sends ready, then events, until its sink goes down",
                 "[actor][push]") {
  auto got = std::make_shared<std::vector<std::string>>();
  auto sink = spawn_sink(*sys, got);
  auto f = send_only<bool>(watch_atom::value, id, std::string{"/work"}, true, sink, uint64_t{9});
  drive();
  REQUIRE(w->watch);
  CHECK(w->watch->started);
  w->watch->cb.on_event({"create", "a.txt"});
  drive();
  REQUIRE(got->size() == 2);
  CHECK((*got)[0] == "9:0:");
  CHECK((*got)[1] == "9:3:create\na.txt");
  CHECK(watch_chunk_parts(watch_chunk("write", "d/b")) == std::make_pair(std::string{"write"},
                                                                         std::string{"d/b"}));
  CHECK_FALSE(f->has_value());
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  drive();
  REQUIRE(f->has_value());
  CHECK((*f)->ok());
  CHECK(w->watch.use_count() == 1); // the actor released its handle
}

TEST_CASE_METHOD(fixture, "a backend without watches is refused by name", "[actor][push]") {
  w->can_watch = false;
  auto got = std::make_shared<std::vector<std::string>>();
  auto sink = spawn_sink(*sys, got);
  auto f = ask<bool>(watch_atom::value, id, std::string{"/work"}, false, sink, uint64_t{1});
  REQUIRE_FALSE(f.ok());
  CHECK(f.err().message.find("watch /work") != std::string::npos);
  CHECK(f.err().message.find("container backend") != std::string::npos);
  CHECK(f.err().message.find("not supported") != std::string::npos);
  CHECK(got->empty());
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  drive();
}
