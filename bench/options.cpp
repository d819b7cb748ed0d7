// Flag parsing for `dsec bench burst`.
#include "bench/options.hpp"

#include <charconv>
#include <functional>
#include <map>

namespace dsec::bench {

namespace {

status parse_int(const std::string& flag, const std::string& v, int min, int& out) {
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || out < min)
    return invalid_argument("dsec bench burst: " + flag + " wants an integer >= " +
                            std::to_string(min) + ", got '" + v + "'");
  return {};
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= v.size()) {
    auto comma = v.find(',', pos);
    auto item = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty() && item != "none")
      out.push_back(item);
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

} // namespace

const char* bench_usage() {
  return "usage: dsec bench burst [--rest HOST:PORT] [--layer REF] [--count N] [--inflight N]\n"
         "                        [--samples N] [--idle N] [--warmup N] [--peers crun,bwrap|none]\n"
         "                        [--rootfs DIR] [--out FILE.json] [--peers-only]\n"
         "                        [--node-pid PID] [--dsec-cgroup DIR] [--phase-cap-s S]\n";
}

expected<burst_options> parse_burst_options(const std::vector<std::string>& args) {
  burst_options o;
  int pid = -1, cap = 30;
  using setter = std::function<status(const std::string&)>;
  auto str = [](std::string& dst) { return setter([&dst](const std::string& v) { dst = v; return status{}; }); };
  auto num = [](const char* f, int min, int& dst) {
    return setter([f, min, &dst](const std::string& v) { return parse_int(f, v, min, dst); });
  };
  std::map<std::string, setter> flags = {
    {"--rest", str(o.rest)},
    {"--layer", str(o.layer)},
    {"--count", num("--count", 1, o.count)},
    {"--inflight", num("--inflight", 1, o.inflight)},
    {"--samples", num("--samples", 1, o.samples)},
    {"--idle", num("--idle", 1, o.idle)},
    {"--warmup", num("--warmup", 0, o.warmup)},
    {"--peers", [&o](const std::string& v) { o.peers = split_list(v); return status{}; }},
    {"--rootfs", str(o.rootfs)},
    {"--out", str(o.out)},
    {"--node-pid", num("--node-pid", 1, pid)},
    {"--dsec-cgroup", str(o.dsec_cgroup)},
    {"--phase-cap-s", num("--phase-cap-s", 1, cap)},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    auto arg = args[i];
    if (arg == "--peers-only") {
      o.peers_only = true;
      continue;
    }
    std::string value;
    auto eq = arg.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto it = flags.find(arg);
    if (it == flags.end())
      return invalid_argument("dsec bench burst: unknown flag '" + arg + "'");
    if (!inline_value) {
      if (i + 1 >= args.size())
        return invalid_argument("dsec bench burst: " + arg + " needs a value");
      value = args[++i];
    }
    if (auto st = it->second(value); !st)
      return st.err();
  }
  o.node_pid = pid;
  o.phase_cap_s = cap;
  return o;
}

} // namespace dsec::bench
