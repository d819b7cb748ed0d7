// `dsec bench burst`: parse flags, probe the node, prepare the peers on one
// busybox rootfs, run the driver on each system, print and save the report.
#include "bench/bench.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "bench/driver.hpp"
#include "bench/dsec_target.hpp"
#include "bench/peers.hpp"
#include "bench/rootfs.hpp"
#include "core/host_port.hpp"

namespace dsec::bench {

namespace {

using nlohmann::json;

json machine_info() {
  utsname u{};
  ::uname(&u);
  return {{"kernel", u.release},
          {"cores", std::thread::hardware_concurrency()},
          {"time", static_cast<long long>(std::time(nullptr))}};
}

// The 1-minute load average: other work on the machine skews every number.
double load_average() {
  double l[1] = {0};
  return ::getloadavg(l, 1) == 1 ? std::round(l[0] * 100) / 100 : -1;
}

json config_json(const burst_options& o) {
  return {{"rest", o.rest},       {"layer", o.layer},     {"count", o.count},
          {"inflight", o.inflight}, {"samples", o.samples}, {"idle", o.idle},
          {"warmup", o.warmup},   {"peers", o.peers},     {"peers_only", o.peers_only}};
}

// dsec's section, or an error if the node cannot be reached.
expected<json> bench_dsec(const burst_options& o) {
  auto hp = parse_host_port(o.rest);
  if (!hp)
    return hp.err();
  auto health = probe_node(hp->first, hp->second);
  if (!health)
    return health.err();
  dsec_target_config cfg{hp->first, hp->second, o.layer, o.node_pid, o.dsec_cgroup};
  dsec_target t(cfg, *health);
  return run_all(t, o);
}

expected<std::unique_ptr<bench_target>> make_peer(const std::string& name, const std::string& workdir,
                                                  const std::string& rootfs) {
  if (name == "crun")
    return make_crun_target(workdir, rootfs);
  if (name == "bwrap")
    return make_bwrap_target(rootfs);
  return invalid_argument("dsec bench burst: unknown peer '" + name + "' (crun, bwrap)");
}

// Each peer's section (or {"error": …}); builds the rootfs first if needed.
json bench_peers(const burst_options& o, const std::string& workdir) {
  json out = json::object();
  auto rootfs = o.rootfs.empty() ? workdir + "/rootfs" : std::filesystem::absolute(o.rootfs).string();
  if (o.rootfs.empty())
    if (auto st = build_busybox_rootfs(rootfs); !st) {
      for (const auto& p : o.peers)
        out[p] = {{"error", st.err().message}};
      return out;
    }
  for (const auto& name : o.peers) {
    std::cerr << "bench " << name << ": preparing on rootfs " << rootfs << std::endl;
    auto t = make_peer(name, workdir, rootfs);
    if (!t) {
      std::cerr << "bench " << name << ": " << t.err().message << std::endl;
      out[name] = {{"error", t.err().message}};
      continue;
    }
    out[name] = run_all(**t, o);
  }
  return out;
}

int emit(const json& report, const std::string& out) {
  auto text = report.dump(2);
  std::cout << text << std::endl;
  if (!out.empty()) {
    std::ofstream f(out);
    f << text << '\n';
    if (!f) {
      std::cerr << "bench: write report " << out << " failed" << std::endl;
      return 1;
    }
  }
  return 0;
}

int run_burst(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << bench_usage();
      return 0;
    }
  auto o = parse_burst_options(args);
  if (!o) {
    std::cerr << o.err().message << '\n' << bench_usage();
    return 2;
  }
  json report = {{"bench", "burst"}, {"machine", machine_info()}, {"config", config_json(*o)}};
  json systems = json::object();
  report["machine"]["loadavg_1m_start"] = load_average();
  if (!o->peers_only) {
    auto d = bench_dsec(*o);
    if (!d) {
      std::cerr << "bench: dsec node at " << o->rest << " is not reachable: " << d.err().message
                << "\n(start `dsec node`, or pass --peers-only to measure only the peers)" << std::endl;
      return 1;
    }
    systems["dsec"] = *d;
  }
  if (!o->peers.empty()) {
    char tmpl[] = "/tmp/dsec-bench-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::cerr << "bench: mkdtemp /tmp/dsec-bench-XXXXXX failed" << std::endl;
      return 1;
    }
    auto peers = bench_peers(*o, tmpl);
    for (auto& [name, section] : peers.items())
      systems[name] = section;
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
  }
  report["machine"]["loadavg_1m_end"] = load_average();
  report["systems"] = systems;
  report["ratios"] = compute_ratios(systems);
  bool any = false;
  for (const auto& [name, s] : systems.items())
    any = any || s.contains("metrics");
  int rc = emit(report, o->out);
  return any ? rc : 1;
}

} // namespace

int run_bench_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << bench_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "burst") {
    std::cerr << "dsec bench: unknown benchmark '" << args[0] << "'\n" << bench_usage();
    return 2;
  }
  return run_burst({args.begin() + 1, args.end()});
}

} // namespace dsec::bench
