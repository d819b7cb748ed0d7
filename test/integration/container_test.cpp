// Integration tests of the container backend, run as root: sandboxes are
// created, driven and destroyed for real (exec, streaming, timeouts, layers,
// recovery after a node restart, teardown leaving nothing). Timings of
// create, exec and destroy are printed, never asserted.
#include "container_fixture.hpp"

TEST_CASE("container: create, exec echo, destroy; timings", "[container]") {
  if (!is_root())
    return;
  auto p = w().params(); // builds the layers outside the timed part
  auto t0 = steady_clock::now();
  auto r = w().backend->create(p);
  INFO((r ? "" : r.err().message));
  REQUIRE(r);
  auto sb = *r;
  double create_ms = ms_since(t0);
  auto e = run_sh(*sb, "echo hello");
  double first_ms = ms_since(t0);
  CHECK(e.stdout_data == "hello\n");
  CHECK(e.exit_code == 0);
  const int n = 50;
  auto t1 = steady_clock::now();
  for (int i = 0; i < n; ++i) {
    exec_request req;
    req.argv = {"true"};
    auto x = run(*sb, req);
    REQUIRE(x);
    REQUIRE(x->exit_code == 0);
    if (i < 3)
      std::fprintf(stderr, "[timing] exec true inside init: %.2f ms\n", x->duration_ms);
  }
  double true_ms = ms_since(t1) / n;
  auto pid = sb->init_pid();
  auto t2 = steady_clock::now();
  REQUIRE(sb->destroy());
  double destroy_ms = ms_since(t2);
  auto t3 = steady_clock::now();
  for (int i = 0; i < 10; ++i)
    (void)sys::run_command({"/bin/true"});
  std::fprintf(stderr, "[timing] host baseline: spawn+wait /bin/true %.2f ms\n", ms_since(t3) / 10);
  std::fprintf(stderr,
               "[timing] create %.2f ms, create->first output %.2f ms, exec true %.2f ms, "
               "destroy %.2f ms\n",
               create_ms, first_ms, true_ms, destroy_ms);
  require_gone(p.id, p.dir, pid);
  CHECK(sb->destroy()); // idempotent
  auto after = run(*sb, {{"true"}, "", {}, "", 0});
  CHECK_FALSE(after);
}

TEST_CASE("container: create to first output, medians of 20", "[container][timing]") {
  if (!is_root())
    return;
  std::vector<double> create, first, in_init, truth, destroy;
  for (int i = 0; i < 22; ++i) {
    auto p = w().params();
    auto t0 = steady_clock::now();
    auto sb = *w().backend->create(p);
    double c = ms_since(t0);
    auto e = run_sh(*sb, "echo hi");
    double f = ms_since(t0);
    REQUIRE(e.stdout_data == "hi\n");
    auto t1 = steady_clock::now();
    for (int k = 0; k < 5; ++k)
      REQUIRE(run(*sb, {{"true"}, "", {}, "", 0})->exit_code == 0);
    double t = ms_since(t1) / 5;
    auto t2 = steady_clock::now();
    REQUIRE(sb->destroy());
    if (i < 2)
      continue; // first creates of the process warm the node's own caches
    create.push_back(c);
    first.push_back(f);
    in_init.push_back(e.duration_ms);
    truth.push_back(t);
    destroy.push_back(ms_since(t2));
  }
  std::fprintf(stderr,
               "[timing] medians of 20: create %.2f ms, create->first output %.2f ms (first "
               "exec inside init %.2f ms), exec true %.2f ms, destroy %.2f ms\n",
               median(create), median(first), median(in_init), median(truth), median(destroy));
}

TEST_CASE("container: burst of 20 sequential creates", "[container][timing]") {
  if (!is_root())
    return;
  auto t0 = steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    auto sb = make();
    REQUIRE(run_sh(*sb, "true").exit_code == 0);
    REQUIRE(sb->destroy());
  }
  std::fprintf(stderr, "[timing] create+exec+destroy: %.2f ms each\n", ms_since(t0) / 20);
}

TEST_CASE("container: parallel creates from several threads", "[container][timing]") {
  if (!is_root())
    return;
  const int threads = 4, each = 5;
  std::vector<backends::create_params> params;
  for (int i = 0; i < threads * each; ++i)
    params.push_back(w().params());
  std::atomic<int> ok{0};
  auto t0 = steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        auto r = w().backend->create(params[t * each + i]);
        if (!r)
          continue;
        auto e = run(**r, {{"hostname"}, "", {}, "", 0});
        if (e && e->stdout_data == params[t * each + i].id + "\n" && (*r)->destroy())
          ++ok;
      }
    });
  for (auto& th : pool)
    th.join();
  std::fprintf(stderr, "[timing] %d sandboxes on %d threads: %.2f ms each (wall / count)\n",
               threads * each, threads, ms_since(t0) / (threads * each));
  CHECK(ok == threads * each);
  for (auto& p : params)
    require_gone(p.id, p.dir, -1);
}

TEST_CASE("container: exit codes, stderr, stdin, cwd, env", "[container]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.env = {{"FROM_SPEC", "s"}, {"OVERRIDE", "spec"}};
  auto sb = make(spec);
  CHECK(run_sh(*sb, "exit 3").exit_code == 3);
  CHECK(run_sh(*sb, "kill -9 $$").exit_code == 128 + 9);
  auto e = run_sh(*sb, "echo out; echo err >&2");
  CHECK(e.stdout_data == "out\n");
  CHECK(e.stderr_data == "err\n");
  CHECK(run_sh(*sb, "cat", "from stdin").stdout_data == "from stdin");
  std::string big(1 << 20, 'x'); // beyond a pipe buffer both ways
  CHECK(run_sh(*sb, "cat", big).stdout_data.size() == big.size());

  exec_request req;
  req.argv = {"pwd"};
  req.cwd = "/etc";
  CHECK(run(*sb, req)->stdout_data == "/etc\n");
  req.cwd = "/does/not/exist";
  auto missing = run(*sb, req);
  CHECK(missing->exit_code == 127);
  CHECK(missing->stderr_data.find("chdir") != std::string::npos);
  req = {};
  req.argv = {"no-such-command"};
  CHECK(run(*sb, req)->exit_code == 127);

  req = {};
  req.argv = {"/bin/sh", "-c", "echo $FROM_SPEC $OVERRIDE $FROM_REQ $HOME $PATH"};
  req.env = {{"OVERRIDE", "req"}, {"FROM_REQ", "r"}};
  CHECK(run(*sb, req)->stdout_data ==
        "s req r /root /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
  req.env = {{"BAD=NAME", "x"}};
  auto bad = run(*sb, req);
  REQUIRE_FALSE(bad);
  CHECK(bad.err().code == errc::invalid_argument);
  REQUIRE(sb->destroy());
}

TEST_CASE("container: layers stack bottom first", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  CHECK(run_sh(*sb, "cat /etc/layer /etc/bottom").stdout_data == "top\nbottom-only\n");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: timeout kills the process group fast", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  auto t0 = steady_clock::now();
  auto e = run_sh(*sb, "sleep 10 & sleep 10", "", 0.5);
  double took = ms_since(t0);
  CHECK(e.timed_out);
  CHECK(e.exit_code == 128 + 9);
  CHECK(took < 2000);
  CHECK(run_sh(*sb, "ps -o pid,comm | grep -c sleep || true").stdout_data == "0\n");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: cancel kills one exec's process group, others run on", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  auto start = [&](const std::string& cmd) {
    auto done = std::make_shared<std::promise<expected<exec_result>>>();
    exec_request req;
    req.argv = {"/bin/sh", "-c", cmd};
    auto id = sb->exec(req, {nullptr, [done](expected<exec_result> r) { done->set_value(std::move(r)); }});
    return std::make_pair(id, done->get_future());
  };
  auto victim = start("sleep 100 & sleep 100");
  auto other = start("sleep 0.5; echo survived");
  std::this_thread::sleep_for(milliseconds(100)); // both running
  auto t0 = steady_clock::now();
  sb->cancel(victim.first);
  sb->cancel(999999); // unknown ids are ignored
  REQUIRE(victim.second.wait_for(seconds(5)) == std::future_status::ready);
  auto v = victim.second.get();
  REQUIRE(v.ok());
  CHECK(v->exit_code == 128 + 9);
  CHECK(ms_since(t0) < 2000);
  REQUIRE(other.second.wait_for(seconds(10)) == std::future_status::ready);
  auto o = other.second.get();
  REQUIRE(o.ok());
  CHECK(o->stdout_data == "survived\n");
  CHECK(run_sh(*sb, "ps -o comm | grep -c sleep || true").stdout_data == "0\n");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: concurrent execs and streaming", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  const int n = 8;
  std::vector<std::future<expected<exec_result>>> futs;
  auto t0 = steady_clock::now();
  for (int i = 0; i < n; ++i) {
    auto done = std::make_shared<std::promise<expected<exec_result>>>();
    futs.push_back(done->get_future());
    exec_request req;
    req.argv = {"/bin/sh", "-c", "sleep 0.3; echo " + std::to_string(i)};
    sb->exec(req, {nullptr, [done](expected<exec_result> r) { done->set_value(std::move(r)); }});
  }
  for (int i = 0; i < n; ++i) {
    auto r = futs[i].get();
    REQUIRE(r);
    CHECK(r->stdout_data == std::to_string(i) + "\n");
  }
  CHECK(ms_since(t0) < 0.3 * n * 1000 / 2);

  // The first chunk arrives while the command still runs.
  auto first = std::make_shared<std::promise<double>>();
  auto got_first = first->get_future();
  auto done = std::make_shared<std::promise<expected<exec_result>>>();
  auto t1 = steady_clock::now();
  auto seen = std::make_shared<bool>(false);
  exec_request req;
  req.argv = {"/bin/sh", "-c", "echo a; sleep 0.5; echo b"};
  sb->exec(req, {[=](exec_chunk c) {
                   if (!*seen) {
                     *seen = true;
                     first->set_value(ms_since(t1));
                   }
                 },
                 [done](expected<exec_result> r) { done->set_value(std::move(r)); }});
  CHECK(got_first.get() < 400);
  auto r = done->get_future().get();
  REQUIRE(r);
  CHECK(r->stdout_data == "a\nb\n");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: output beyond 16 MiB is truncated", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  auto e = run_sh(*sb, "head -c 20000000 /dev/zero");
  CHECK(e.truncated);
  CHECK(e.stdout_data.size() == (16u << 20));
  CHECK(e.exit_code == 0);
  REQUIRE(sb->destroy());
}

TEST_CASE("container: zombies are reaped", "[container]") {
  if (!is_root())
    return;
  auto sb = make();
  run_sh(*sb, "(sleep 0.05 &) ; (true &) ; exit 0");
  ::usleep(200 * 1000);
  CHECK(run_sh(*sb, "ps -o stat | grep -c Z || true").stdout_data == "0\n");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: init killed from outside is reported", "[container]") {
  if (!is_root())
    return;
  auto p = w().params();
  auto sb = *w().backend->create(p);
  auto reason = std::make_shared<std::promise<std::string>>();
  sb->on_exit([reason](std::string why) { reason->set_value(why); });
  ::kill(sb->init_pid(), SIGKILL);
  auto f = reason->get_future();
  REQUIRE(f.wait_for(seconds(5)) == std::future_status::ready);
  CHECK(f.get().find("init exited") == 0);
  auto after = run(*sb, {{"true"}, "", {}, "", 0});
  CHECK_FALSE(after);
  REQUIRE(sb->destroy());
  require_gone(p.id, p.dir, -1);
}

TEST_CASE("container: a create failing halfway leaves nothing", "[container]") {
  if (!is_root())
    return;
  auto p = w().params();
  p.lower_dirs.push_back(w().tmp + "/no-such-layer");
  auto r = w().backend->create(p);
  REQUIRE_FALSE(r);
  INFO(r.err().message);
  CHECK(r.err().message.find("no-such-layer") != std::string::npos);
  require_gone(p.id, p.dir, -1);

  auto bad = backends::make_container_backend({node_id, "/nonexistent/dsec-init", "/sys/fs/cgroup", nullptr});
  auto r2 = bad->create(w().params());
  REQUIRE_FALSE(r2);
  CHECK(r2.err().code == errc::not_found);
}

TEST_CASE("container: recover after a node restart", "[container]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.env = {{"KEPT", "yes"}};
  auto p = w().params(spec);
  auto first = *w().backend->create(p);
  run_sh(*first, "echo kept > /tmp/state");
  // A second backend stands for the restarted node; the first handle is
  // simply dropped, as a crashed node would.
  auto node2 = backends::make_container_backend({node_id, DSEC_INIT_PATH, "/sys/fs/cgroup", nullptr});
  auto again = node2->recover(p.id, p.dir);
  INFO((again ? "" : again.err().message));
  REQUIRE(again);
  CHECK((*again)->init_pid() == first->init_pid());
  CHECK(run_sh(**again, "cat /tmp/state; echo $KEPT").stdout_data == "kept\nyes\n");
  // The old connection is gone: its execs fail, the new one keeps working.
  auto old = run(*first, {{"true"}, "", {}, "", 0});
  CHECK_FALSE(old);
  CHECK(run_sh(**again, "echo again").stdout_data == "again\n");
  REQUIRE((*again)->destroy());
  require_gone(p.id, p.dir, -1);
  CHECK_FALSE(node2->recover(p.id, p.dir));
  CHECK(node2->recover("x", w().tmp + "/nothing").err().code == errc::not_found);

  // A node killed mid-create leaves a dir without meta and a live init:
  // recover() removes all of it.
  auto p3 = w().params();
  auto third = *w().backend->create(p3);
  int pid3 = third->init_pid();
  REQUIRE(::unlink((p3.dir + "/meta").c_str()) == 0);
  auto gone = node2->recover(p3.id, p3.dir);
  REQUIRE_FALSE(gone);
  CHECK(gone.err().code == errc::not_found);
  require_gone(p3.id, p3.dir, -1);
  CHECK((::kill(pid3, 0) != 0 || sys::read_file("/proc/" + std::to_string(pid3) + "/stat")->find(") Z") != std::string::npos));
}

