// dsec-net-bench: what the eBPF security programs cost (backends/net).
// Prints one JSON object:
//
//  - connect_us: one UDP connect() (route lookup only, no handshake, so the
//    hook's share is as large as it gets) from a process in a sandbox-like
//    cgroup, without the programs, with them and an entry whose 128th rule
//    is the match (the longest walk), and with loopback (the short cut).
//  - update_ms: policy_engine::put() until the next connect() from the
//    cgroup sees the new rule (allow <-> deny flips, checked each time).
//  - exec: container exec latency (exec of /bin/true through the backend,
//    and a 300-iteration fork+exec loop inside the sandbox) with the whole
//    security set (seccomp + eBPF: the sys_exit counter is on every syscall
//    of the machine) against seccomp alone (DSEC_EBPF=off).
//
// Needs root. Usage: dsec-net-bench <busybox erofs image> [rounds]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/container/container_backend.hpp"
#include "backends/net/net_policy.hpp"
#include <bpf/bpf.h>

#include "sys/cgroup.hpp"
#include "sys/fd.hpp"
#include "sys/process.hpp"
#include "sys/fs.hpp"

using namespace dsec;
using clk = std::chrono::steady_clock;

namespace {

double us_since(clk::time_point t) {
  return std::chrono::duration<double, std::micro>(clk::now() - t).count();
}

nlohmann::json summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v)
    sum += x;
  return {{"n", v.size()}, {"median", v[v.size() / 2]}, {"p99", v[v.size() * 99 / 100]},
          {"mean", sum / double(v.size())}};
}

// Kernel-measured cost per run of the programs named `name` (every loaded
// copy on the machine), from BPF run-time stats: independent of how loaded
// the shared machine is, unlike the wall-clock numbers.
nlohmann::json prog_cost(const std::string& name) {
  auto r = sys::run_command({"bpftool", "-j", "prog", "show", "name", name});
  if (!r || r->exit_code != 0)
    return nullptr;
  auto j = nlohmann::json::parse(r->output, nullptr, false);
  if (j.is_discarded())
    return nullptr;
  if (!j.is_array())
    j = nlohmann::json::array({j});
  double ns = 0, cnt = 0;
  for (auto& p : j) {
    ns += p.value("run_time_ns", 0.0);
    cnt += p.value("run_cnt", 0.0);
  }
  return {{"runs", cnt}, {"ns_per_run", cnt > 0 ? ns / cnt : 0}};
}

void join_cgroup(const std::string& dir) {
  std::ofstream(dir + "/cgroup.procs") << ::getpid() << "\n";
}

// 0 = connected, else errno.
int udp_connect(uint32_t be_addr, uint16_t port) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = be_addr;
  a.sin_port = htons(port);
  int rc = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
  ::close(s);
  return rc;
}

std::vector<double> connect_times(uint32_t be_addr, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    auto t = clk::now();
    udp_connect(be_addr, 53);
    out.push_back(us_since(t));
  }
  return out;
}

nlohmann::json connect_and_update(int rounds) {
  auto parent = "/sys/fs/cgroup/unified/dsec/netbench" + std::to_string(::getpid());
  auto child = parent + "/sb";
  (void)sys::make_dirs(child);
  join_cgroup(child);
  uint32_t target = inet_addr("10.200.0.1"), lo = inet_addr("127.0.0.1");
  nlohmann::json out;
  out["connect_us"]["no_program"] = summary(connect_times(target, rounds));
  {
    auto eng = net::policy_engine::load(parent, 3);
    if (!eng) {
      std::cerr << eng.err().message << "\n";
      std::exit(1);
    }
    auto cg = *net::cgroup_id_of(child);
    std::vector<net::rule> rules(128);
    for (int i = 0; i < 128; ++i)
      rules[i].addr = net::v4_mapped(inet_addr(("10.201.0." + std::to_string(i)).c_str()));
    rules[127].addr = net::v4_mapped(target);
    (void)(*eng)->put(cg, rules);
    out["connect_us"]["program_128_rules"] = summary(connect_times(target, rounds));
    out["connect_us"]["program_loopback"] = summary(connect_times(lo, rounds));
    std::vector<double> upd;
    for (int i = 0; i < 200; ++i) {
      bool allow = i % 2 == 0;
      rules[127].port = allow ? 53 : 54;
      auto t = clk::now();
      (void)(*eng)->put(cg, rules);
      int rc = udp_connect(target, 53);
      upd.push_back(us_since(t) / 1000);
      if ((rc == 0) != allow) {
        std::cerr << "update " << i << " not seen by the next connect\n";
        std::exit(1);
      }
    }
    out["update_ms"] = summary(upd);
    out["kernel_ns_per_run"]["connect4"] = prog_cost("dsec_connect4");
    (*eng)->erase(cg);
  }
  join_cgroup("/sys/fs/cgroup/unified");
  ::rmdir(child.c_str());
  ::rmdir(parent.c_str());
  return out;
}

expected<exec_result> run(backends::sandbox& sb, std::vector<std::string> argv) {
  std::promise<expected<exec_result>> done;
  auto fut = done.get_future();
  exec_request req;
  req.argv = std::move(argv);
  sb.exec(std::move(req), {nullptr, [&done](expected<exec_result> r) { done.set_value(std::move(r)); }});
  return fut.get();
}

// Exec latency through one backend: per-exec round trips and an in-sandbox
// fork+exec loop, over `rounds` alternating runs.
nlohmann::json exec_latency(const std::string& lower, const std::string& tmp, bool ebpf,
                            int rounds) {
  if (ebpf)
    ::unsetenv("DSEC_EBPF");
  else
    ::setenv("DSEC_EBPF", "off", 1);
  auto node = std::string{"netbench"} + (ebpf ? "e" : "n") + std::to_string(::getpid());
  auto be = backends::make_container_backend({node, DSEC_INIT_PATH, "/sys/fs/cgroup", nullptr});
  backends::create_params p;
  p.id = node + ".sb";
  p.lower_dirs = {lower};
  p.dir = tmp + "/" + p.id;
  auto sb = be->create(p);
  if (!sb) {
    std::cerr << sb.err().message << "\n";
    std::exit(1);
  }
  std::vector<double> one, loop;
  for (int i = 0; i < 20; ++i) // warm up
    (void)run(**sb, {"/bin/true"});
  for (int r = 0; r < rounds; ++r) {
    auto t = clk::now();
    (void)run(**sb, {"/bin/true"});
    one.push_back(us_since(t));
  }
  for (int r = 0; r < 5; ++r) {
    auto t = clk::now();
    (void)run(**sb, {"/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done"});
    loop.push_back(us_since(t) / 300);
  }
  nlohmann::json cost = ebpf ? prog_cost("dsec_sys_exit") : nullptr;
  (void)(*sb)->destroy();
  be.reset();
  sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec/" + node);
  return {{"exec_roundtrip_us", summary(one)}, {"fork_exec_in_sandbox_us", summary(loop)},
          {"sys_exit_program", cost}};
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: dsec-net-bench <busybox erofs image> [rounds]\n";
    return 2;
  }
  int rounds = argc > 2 ? std::atoi(argv[2]) : 2000;
  char t[] = "/tmp/dsec-netbench-XXXXXX";
  std::string tmp = ::mkdtemp(t);
  auto lower = tmp + "/layer";
  ::mkdir(lower.c_str(), 0755);
  if (::mount(argv[1], lower.c_str(), "erofs", MS_RDONLY, nullptr) != 0) {
    std::perror("mount erofs");
    return 1;
  }
  auto loadavg = [] {
    std::string l;
    std::getline(std::ifstream("/proc/loadavg"), l);
    return l;
  };
  auto load_before = loadavg();
  // Run-time stats for as long as this fd is open (no sysctl to restore).
  sys::unique_fd stats{static_cast<int>(bpf_enable_stats(BPF_STATS_RUN_TIME))};
  auto out = connect_and_update(rounds);
  // Alternate the two configurations so machine load hits both alike.
  std::vector<nlohmann::json> with, without;
  for (int i = 0; i < 3; ++i) {
    without.push_back(exec_latency(lower, tmp, false, 200));
    with.push_back(exec_latency(lower, tmp, true, 200));
  }
  auto med = [](std::vector<nlohmann::json>& v, const char* k) {
    std::vector<double> m;
    for (auto& j : v)
      m.push_back(j[k]["median"].get<double>());
    std::sort(m.begin(), m.end());
    return m[m.size() / 2];
  };
  for (auto k : {"exec_roundtrip_us", "fork_exec_in_sandbox_us"}) {
    double a = med(with, k), b = med(without, k);
    out["exec"][k] = {{"seccomp_and_ebpf", a}, {"seccomp_only", b}, {"ratio", a / b}};
  }
  out["exec"]["runs"] = {{"seccomp_and_ebpf", with}, {"seccomp_only", without}};
  ::umount2(lower.c_str(), MNT_DETACH);
  (void)sys::remove_tree(tmp);
  // The machine is shared: the load says how far to trust the numbers.
  out["loadavg"] = {{"before", load_before}, {"after", loadavg()}};
  std::cout << out.dump(1) << "\n";
  return 0;
}
