// Integration tests of the container backend, run as root: a busybox root
// packed into an EROFS image and mounted file-backed as the bottom layer,
// a plain directory as a second layer, and real sandboxes that the tests
// probe from inside (pid 1, hostname, capabilities, seccomp, network) and
// from outside (files, limits, teardown leaving nothing behind). Timings of
// create, exec and destroy are printed, never asserted.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <atomic>
#include <future>
#include <thread>
#include <sstream>

#include "backends/container/container_backend.hpp"
#include "backends/container/launch.hpp"
#include "backends/container/seccomp_filter.hpp"
#include "backends/init/protocol.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

using namespace dsec;
using namespace std::chrono;
using proto_config = dsec::init_proto::config_msg;

namespace {

const std::string node_id = "itest" + std::to_string(::getpid());

std::string sh(const std::string& cmd) {
  auto r = sys::run_command({"/bin/sh", "-c", cmd});
  REQUIRE(r);
  INFO(cmd << ": " << r->output);
  REQUIRE(r->exit_code == 0);
  return r->output;
}

// The layers, built once per test run and torn down at exit.
struct world {
  std::string tmp, erofs_dir, top_dir, secret;
  std::unique_ptr<backends::backend> backend;
  int counter = 0;

  world() {
    char t[] = "/tmp/dsec-ct-XXXXXX";
    tmp = ::mkdtemp(t);
    auto root = tmp + "/busybox";
    sh("mkdir -p " + root + "/bin " + root + "/etc " + root + "/tmp " + root + "/proc " +
       root + "/dev " + root + "/sys " + root + "/root " + root + "/mnt && chmod 1777 " +
       root + "/tmp && cp /bin/busybox " + root + "/bin/busybox && cd " + root +
       "/bin && for a in $(./busybox --list); do [ $a = busybox ] || ln -s busybox $a; done");
    sh("echo 'root:x:0:0:root:/root:/bin/sh' > " + root + "/etc/passwd && echo bottom > " +
       root + "/etc/layer && echo bottom-only > " + root + "/etc/bottom");
    sh("mkfs.erofs -T0 " + tmp + "/base.erofs " + root + " >/dev/null 2>&1");
    erofs_dir = tmp + "/base";
    sh("mkdir -p " + erofs_dir);
    REQUIRE(::mount((tmp + "/base.erofs").c_str(), erofs_dir.c_str(), "erofs", MS_RDONLY,
                    nullptr) == 0);
    top_dir = tmp + "/top";
    sh("mkdir -p " + top_dir + "/etc && echo top > " + top_dir + "/etc/layer");
    secret = tmp + "/host-secret";
    sh("echo HOSTSECRET > " + secret);
    backend = backends::make_container_backend({node_id, DSEC_INIT_PATH, "/sys/fs/cgroup"});
  }

  ~world() {
    backend.reset();
    ::umount2(erofs_dir.c_str(), MNT_DETACH);
    (void)sys::remove_tree(tmp);
    for (auto c : {"cpu", "memory", "pids", "freezer", "unified"})
      ::rmdir(("/sys/fs/cgroup/" + std::string(c) + "/dsec/" + node_id).c_str());
  }

  backends::create_params params(sandbox_spec spec = {}) {
    backends::create_params p;
    p.id = node_id + ".sb" + std::to_string(++counter);
    p.spec = std::move(spec);
    p.lower_dirs = {erofs_dir, top_dir};
    p.dir = tmp + "/sandboxes/" + p.id;
    return p;
  }
};

world& w() {
  static world instance;
  return instance;
}

bool is_root() {
  if (::geteuid() == 0)
    return true;
  WARN("skipped: needs root (CAP_SYS_ADMIN for mounts, namespaces, cgroups)");
  return false;
}

double ms_since(steady_clock::time_point t) {
  return duration<double, std::milli>(steady_clock::now() - t).count();
}

std::shared_ptr<backends::sandbox> make(sandbox_spec spec = {}) {
  auto r = w().backend->create(w().params(std::move(spec)));
  INFO((r ? "" : r.err().message));
  REQUIRE(r);
  return *r;
}

// Runs one exec and waits; no Catch2 macros, so threads may call it.
expected<exec_result> run(backends::sandbox& sb, exec_request req) {
  auto done = std::make_shared<std::promise<expected<exec_result>>>();
  auto fut = done->get_future();
  sb.exec(std::move(req), {nullptr, [done](expected<exec_result> r) { done->set_value(std::move(r)); }});
  if (fut.wait_for(seconds(30)) != std::future_status::ready)
    return error{errc::timeout, "exec did not finish within 30 s"};
  return fut.get();
}

exec_result run_sh(backends::sandbox& sb, const std::string& cmd, std::string in = {},
                   double timeout_s = 0) {
  exec_request req;
  req.argv = {"/bin/sh", "-c", cmd};
  req.stdin_data = std::move(in);
  req.timeout_s = timeout_s;
  auto r = run(sb, std::move(req));
  INFO(cmd << ": " << (r ? "" : r.err().message));
  REQUIRE(r);
  return *r;
}

std::string status_field(backends::sandbox& sb, const std::string& name) {
  auto r = run_sh(sb, "grep '^" + name + ":' /proc/self/status | cut -f2");
  return r.stdout_data;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Starts dsec-init by hand on an overlay root with `cfg` (no cgroups) and
// returns its answer: "ready" or the failure message.
std::string init_answer(proto_config cfg) {
  auto dir = w().tmp + "/raw" + std::to_string(++w().counter);
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(backends::mount_overlay(dir, {w().erofs_dir, w().top_dir}));
  cfg.rootfs = dir + "/rootfs";
  auto img = backends::seal_init_binary(DSEC_INIT_PATH);
  REQUIRE(img);
  auto sock = backends::make_control_socket(dir);
  REQUIRE(sock);
  auto frame = init_proto::encode(cfg);
  REQUIRE(::send(sock->client.get(), frame.data(), frame.size(), MSG_NOSIGNAL) ==
          ssize_t(frame.size()));
  auto child = backends::launch_init(*img, sock->listener.get(), {});
  REQUIRE(child);
  std::string in, answer = "no answer";
  char buf[4096];
  init_proto::header h;
  for (;;) {
    if (init_proto::peek_frame(in, h) == init_proto::parse::complete) {
      init_proto::reader r(std::string_view(in).substr(init_proto::header_size, h.length));
      answer = h.type == init_proto::msg::ready ? "ready" : r.str();
      break;
    }
    pollfd p{sock->client.get(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1)
      break;
    auto n = ::recv(sock->client.get(), buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    in.append(buf, size_t(n));
  }
  backends::kill_and_reap(child->pidfd.get());
  ::umount2((dir + "/rootfs").c_str(), MNT_DETACH);
  (void)sys::remove_tree(dir);
  return answer;
}

bool mounted_below(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.find(dir) != std::string::npos)
      return true;
  return false;
}

void require_gone(const std::string& id, const std::string& dir, int pid) {
  CHECK_FALSE(mounted_below(dir));
  CHECK_FALSE(sys::exists(dir));
  for (auto c : {"cpu", "memory", "pids", "freezer", "unified"})
    CHECK_FALSE(sys::exists("/sys/fs/cgroup/" + std::string(c) + "/dsec/" + node_id + "/" + id));
  if (pid > 0)
    CHECK((::kill(pid, 0) != 0 && errno == ESRCH));
}

} // namespace

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

TEST_CASE("container: namespaces: pid 1, hostname, network", "[container][security]") {
  if (!is_root())
    return;
  auto p = w().params();
  auto r = w().backend->create(p);
  REQUIRE(r);
  auto sb = *r;
  CHECK(run_sh(*sb, "cat /proc/1/comm").stdout_data.find("init") != std::string::npos);
  // Only init, the shell and ls (maybe) live here.
  // Only init, the shell and its pipeline (ls, grep) live here.
  auto procs = run_sh(*sb, "ls /proc | grep -c '^[0-9]'").stdout_data;
  CHECK(std::stoi(procs) <= 4);
  CHECK(run_sh(*sb, "ps -o pid,comm | grep -c dsec-init").stdout_data == "1\n");
  CHECK(run_sh(*sb, "hostname").stdout_data == p.id + "\n");
  CHECK(run_sh(*sb, "ls /sys/class/net").stdout_data == "lo\n");
  CHECK(run_sh(*sb, "cat /sys/class/net/lo/flags").stdout_data == "0x9\n"); // UP|LOOPBACK
  CHECK(run_sh(*sb, "nc -l -p 7777 > /tmp/got & sleep 0.1; echo hi | nc 127.0.0.1 7777; "
                    "wait; cat /tmp/got", "", 5).stdout_data == "hi\n");
  CHECK(run_sh(*sb, "wget -T 1 -q -O- http://1.1.1.1/ 2>&1; echo $?").stdout_data != "0\n");
  CHECK(run_sh(*sb, "cat /proc/self/cgroup | grep memory").stdout_data.find(":/\n") !=
        std::string::npos);
  REQUIRE(sb->destroy());
}

TEST_CASE("container: privileges: caps, no_new_privs, seccomp, fds", "[container][security]") {
  if (!is_root())
    return;
  auto sb = make();
  for (auto f : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    CHECK(status_field(*sb, f) == "0000000000000000\n");
  CHECK(status_field(*sb, "NoNewPrivs") == "1\n");
  CHECK(run_sh(*sb, "cat /proc/self/oom_score_adj").stdout_data == "0\n");
  CHECK(status_field(*sb, "Seccomp") == "2\n");
  CHECK(run_sh(*sb, "mount -t tmpfs x /mnt").exit_code != 0);
  CHECK(run_sh(*sb, "unshare -U true").exit_code != 0);
  CHECK(run_sh(*sb, "unshare -n true").exit_code != 0);
  CHECK(run_sh(*sb, "echo 1 > /proc/sys/kernel/sysrq").exit_code != 0);
  CHECK(run_sh(*sb, "echo x > /proc/sysrq-trigger").exit_code != 0);
  CHECK(run_sh(*sb, "echo x >> /sys/kernel/uevent_helper").exit_code != 0);
  // Only the command's own descriptors; init's are unreachable.
  CHECK(run_sh(*sb, "ls /proc/self/fd | tr '\\n' ' '").stdout_data == "0 1 2 3 ");
  CHECK(run_sh(*sb, "readlink /proc/1/fd/3").exit_code != 0); // init is not dumpable
  CHECK(run_sh(*sb, "readlink /proc/1/exe").exit_code != 0);
  CHECK(run_sh(*sb, "echo x > /proc/1/exe").exit_code != 0);
  CHECK(run_sh(*sb, "ls /dev | tr '\\n' ' '").stdout_data ==
        "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero ");
  REQUIRE(sb->destroy());
}

TEST_CASE("container: init refuses a malformed seccomp program", "[container][security]") {
  if (!is_root())
    return;
  auto good = backends::build_seccomp_program();
  REQUIRE(good);
  REQUIRE(good->size() % 8 == 0);
  CHECK(init_answer({"raw", "", *good}) == "ready");
  auto refused = [](std::string prog) {
    auto a = init_answer({"raw", "", std::move(prog)});
    INFO(a);
    CHECK(a.find("seccomp") != std::string::npos);
  };
  refused("");                                       // no program: never unfiltered
  refused(good->substr(0, good->size() - 3));        // torn instruction
  refused(std::string(8 * 4097, '\0'));              // beyond BPF_MAXINSNS
  refused(std::string("\xff\xff\0\0\0\0\0\0", 8)); // rejected by the kernel
  refused(good->substr(0, good->size() - 8));        // no final return: kernel rejects
}

TEST_CASE("container: init is in the sandbox cgroups from its start", "[container][limits]") {
  if (!is_root())
    return;
  auto p = w().params();
  auto sb = *w().backend->create(p);
  auto cg = *sys::read_file("/proc/" + std::to_string(sb->init_pid()) + "/cgroup");
  for (auto c : {":cpu:", ":memory:", ":pids:", ":freezer:", "0::"}) {
    auto at = cg.find(c);
    INFO(cg);
    REQUIRE(at != std::string::npos);
    CHECK(cg.substr(at, cg.find('\n', at) - at).find("/dsec/" + node_id + "/" + p.id) !=
          std::string::npos);
  }
  REQUIRE(sb->destroy());
}

TEST_CASE("container: files in and out, no escape", "[container][security]") {
  if (!is_root())
    return;
  auto sb = make();
  std::string bin;
  for (int i = 0; i < 256 * 4; ++i)
    bin += static_cast<char>(i);
  REQUIRE(sb->write_file("/work/deep/nested/a.bin", bin, 0640));
  auto back = sb->read_file("/work/deep/nested/a.bin", 1 << 20);
  REQUIRE(back);
  CHECK(*back == bin);
  CHECK(run_sh(*sb, "stat -c %a /work/deep/nested/a.bin; wc -c < /work/deep/nested/a.bin")
          .stdout_data == "640\n1024\n");
  run_sh(*sb, "echo inside > /tmp/made-inside");
  CHECK(*sb->read_file("/tmp/made-inside", 100) == "inside\n");
  CHECK(sb->read_file("/tmp/made-inside", 3).err().code == errc::too_large);
  CHECK(sb->read_file("/nope", 100).err().code == errc::not_found);
  CHECK(sb->read_file("tmp/x", 100).err().code == errc::invalid_argument);
  CHECK(sb->read_file("/tmp/../etc/passwd", 100).err().code == errc::invalid_argument);
  CHECK(sb->write_file("/../x", "x", 0644).err().code == errc::invalid_argument);

  // Planted links: absolute to a host path, relative climbing out, to /.
  const auto& secret = w().secret;
  run_sh(*sb, "ln -s " + secret + " /tmp/abs; ln -s ../../../../../../../.." + secret +
                " /tmp/rel; ln -s / /tmp/root; mkdir -p /tmp/d; ln -s / /tmp/d/up");
  for (auto path : {"/tmp/abs", "/tmp/rel", ("/tmp/root" + secret).c_str(),
                    ("/tmp/d/up" + secret).c_str()}) {
    auto got = sb->read_file(path, 100);
    CHECK_FALSE((got && got->find("HOSTSECRET") != std::string::npos));
  }
  (void)sb->write_file("/tmp/abs", "pwned", 0644);
  (void)sb->write_file("/tmp/root" + secret, "pwned", 0644);
  (void)sb->write_file("/tmp/d/up" + secret + ".new", "pwned", 0644);
  CHECK(*sys::read_file(secret) == "HOSTSECRET\n");
  CHECK_FALSE(sys::exists(secret + ".new"));
  REQUIRE(sb->destroy());
}

TEST_CASE("container: memory limit kills inside the sandbox only", "[container][limits]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.memory_mb = 32;
  auto sb = make(spec);
  auto reason = std::make_shared<std::promise<std::string>>();
  sb->on_exit([reason](std::string why) { reason->set_value(why); });
  exec_request req;
  req.argv = {"/bin/sh", "-c", "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo survived"};
  auto r = run(*sb, req);
  if (r) {
    CHECK(r->exit_code != 0);
    CHECK(r->stdout_data.find("survived") == std::string::npos);
    auto alive = run_sh(*sb, "echo alive");
    CHECK(alive.stdout_data == "alive\n");
  } else {
    auto f = reason->get_future();
    REQUIRE(f.wait_for(seconds(5)) == std::future_status::ready);
    CHECK(f.get() == "oom");
  }
  REQUIRE(sb->destroy());
}

TEST_CASE("container: pids limit bounds a fork bomb", "[container][limits]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.pids = 16;
  auto p = w().params(spec);
  auto sb = *w().backend->create(p);
  auto e = run_sh(*sb, "i=0; while [ $i -lt 50 ]; do sleep 2 & i=$((i+1)); done 2>/dev/null; "
                       "echo spawned", "", 10);
  auto cg = "/sys/fs/cgroup/pids/dsec/" + node_id + "/" + p.id;
  CHECK(std::stoi(*sys::read_file(cg + "/pids.current")) <= 16);
  CHECK(sys::read_file(cg + "/pids.events")->find("max 0") == std::string::npos);
  ::usleep(2500 * 1000); // the sleeps end; the sandbox answers again
  CHECK(run_sh(*sb, "echo ok").stdout_data == "ok\n");
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

  auto bad = backends::make_container_backend({node_id, "/nonexistent/dsec-init"});
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
  auto node2 = backends::make_container_backend({node_id, DSEC_INIT_PATH});
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

TEST_CASE("protocol: malformed frames are errors, never crashes", "[protocol]") {
  namespace proto = init_proto;
  proto::exec_msg m;
  m.argv = {"echo", "hi"};
  m.env = {"A=1"};
  m.stdin_data = std::string("\0x", 2);
  m.timeout_ms = 42;
  auto frame = proto::encode(7, m);
  proto::header h;
  REQUIRE(proto::peek_frame(frame, h) == proto::parse::complete);
  CHECK(h.id == 7);
  CHECK(h.type == proto::msg::exec);
  proto::exec_msg back;
  REQUIRE(proto::decode(std::string_view(frame).substr(proto::header_size), back));
  CHECK(back.argv == m.argv);
  CHECK(back.stdin_data == m.stdin_data);
  CHECK(back.timeout_ms == 42);
  // Every truncation of the body fails to decode.
  auto body = std::string_view(frame).substr(proto::header_size);
  for (size_t n = 0; n < body.size(); ++n)
    CHECK_FALSE(proto::decode(body.substr(0, n), back));
  CHECK(proto::peek_frame(std::string_view(frame).substr(0, 5), h) == proto::parse::incomplete);
  // Oversized length, lying counts, trailing bytes.
  std::string huge = frame;
  uint32_t big = proto::max_body + 1;
  std::memcpy(&huge[0], &big, 4);
  CHECK(proto::peek_frame(huge, h) == proto::parse::invalid);
  auto lying = proto::writer(proto::msg::exec, 1).u32(0xffffffffu).finish();
  CHECK_FALSE(proto::decode(std::string_view(lying).substr(proto::header_size), back));
  auto trailing = std::string(body) + "x";
  CHECK_FALSE(proto::decode(trailing, back));
  proto::reader r(std::string_view("\x05\0\0\0ab", 6));
  CHECK(r.str().empty());
  CHECK_FALSE(r.ok());

  // config carries the seccomp program; its shape is checked before use.
  proto::config_msg cfg{"h", "/r", std::string(16, '\x01')};
  auto cframe = proto::encode(cfg);
  proto::config_msg cback;
  REQUIRE(proto::decode(std::string_view(cframe).substr(proto::header_size), cback));
  CHECK(cback.seccomp_bpf == cfg.seccomp_bpf);
  auto old_config = proto::writer(proto::msg::config, 0).str("h").str("/r").finish();
  CHECK_FALSE(proto::decode(std::string_view(old_config).substr(proto::header_size), cback));
  CHECK(proto::filter_shape_error("") != nullptr);
  CHECK(proto::filter_shape_error(std::string(7, 'x')) != nullptr);
  CHECK(proto::filter_shape_error(std::string(8 * 4097, 'x')) != nullptr);
  CHECK(proto::filter_shape_error(std::string(8 * 4096, 'x')) == nullptr);
}
