// Shared fixture of the container integration tests: a busybox EROFS layer
// mounted file-backed, one backend per test program, helpers to run commands
// and to check that a sandbox left nothing behind. Included by exactly one
// test file per executable.
#pragma once

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
#include "backends/policy/seccomp_filter.hpp"
#include "backends/channel/protocol.hpp"
#include "privilege.hpp"
#include "sys/cgroup.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

using namespace dsec;
using namespace std::chrono;
using proto_config = dsec::init_proto::config_msg;

namespace container_fixture {

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
    backend = backends::make_container_backend({node_id, DSEC_INIT_PATH, "/sys/fs/cgroup", nullptr});
  }

  ~world() {
    backend.reset();
    ::umount2(erofs_dir.c_str(), MNT_DETACH);
    (void)sys::remove_tree(tmp);
    sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec/" + node_id);
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
  return dsec::test::have_root("needs root (CAP_SYS_ADMIN for mounts, namespaces, cgroups)");
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
  auto root = backends::mount_overlay(dir, {w().erofs_dir, w().top_dir});
  REQUIRE(root);
  cfg.rootfs = dir + "/rootfs";
  cfg.attach_root = true;
  auto img = backends::seal_init_binary(DSEC_INIT_PATH);
  REQUIRE(img);
  auto sock = backends::make_control_socket(dir);
  REQUIRE(sock);
  auto frame = init_proto::encode(cfg);
  REQUIRE(::send(sock->client.get(), frame.data(), frame.size(), MSG_NOSIGNAL) ==
          ssize_t(frame.size()));
  auto child = backends::launch_init(*img, sock->listener.get(), {}, &*root);
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
  root = backends::overlay_root{}; // the mounts were never on the host
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

} // namespace container_fixture

using namespace container_fixture;
