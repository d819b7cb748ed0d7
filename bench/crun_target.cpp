// crun as a system under test. Each trial is one crun command, run from a
// forked child that first joins a mount namespace in which an empty file
// hides /sys/fs/cgroup/unified/cgroup.controllers (crun refuses the hybrid
// layout otherwise); that setns(2) is the only extra cost charged to crun, and
// notes() reports it, measured on /bin/true.
//
//   create + first output: `crun run` of /bin/echo hi, timed to the first byte
//   exec:                  `crun exec ID /bin/true` in a `crun run -d` container
//   burst create:          `crun run -d` of /bin/sleep; destroy: `crun delete -f`
#include <atomic>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "bench/memory.hpp"
#include "bench/peers.hpp"
#include "bench/spawn.hpp"
#include "bench/stats.hpp"

namespace dsec::bench {

namespace {

using nlohmann::json;

constexpr const char* cgroup_controllers = "/sys/fs/cgroup/unified/cgroup.controllers";

// Writes DIR/config.json from `crun spec`, edited: our rootfs, `args`, no
// terminal, a writable root (as bwrap's --bind; the cheapest crun setup).
status write_bundle(const std::string& crun, const std::string& dir, const std::string& rootfs,
                    const std::vector<std::string>& args) {
  std::filesystem::create_directories(dir);
  auto spec = run({crun, "spec", "--bundle", dir});
  if (!spec || spec->exit_code != 0)
    return internal_error("crun spec --bundle " + dir + ": " + (spec ? spec->output : spec.err().message));
  std::ifstream in(dir + "/config.json");
  auto cfg = json::parse(in, nullptr, false);
  if (cfg.is_discarded())
    return internal_error("crun spec: " + dir + "/config.json is not JSON");
  cfg["root"] = {{"path", rootfs}, {"readonly", false}};
  cfg["process"]["terminal"] = false;
  cfg["process"]["args"] = args;
  std::ofstream out(dir + "/config.json");
  out << cfg.dump(2);
  if (!out)
    return internal_error("write " + dir + "/config.json failed");
  return {};
}

class crun_target;

class crun_worker : public bench_worker {
 public:
  explicit crun_worker(crun_target& t) : t_(t) {}
  expected<std::string> create_idle() override;
  status destroy(const std::string& id) override;

 private:
  crun_target& t_;
};

class crun_target : public bench_target {
 public:
  crun_target(std::string crun, std::string workdir, sys::unique_fd ns)
    : crun_(std::move(crun)), workdir_(std::move(workdir)), ns_(std::move(ns)),
      prefix_("dsecb" + std::to_string(::getpid()) + "-") {}

  [[nodiscard]] std::string name() const override { return "crun"; }

  /// Runs one crun subcommand in the patched namespace; fails on a non-zero exit.
  expected<run_result> crun(std::vector<std::string> args) {
    args.insert(args.begin(), crun_);
    auto r = run(args, ns_.get());
    if (r && r->exit_code != 0)
      return internal_error(args[1] + ' ' + args.back() + ": exit " +
                            std::to_string(r->exit_code) + ": " + r->output.substr(0, 300));
    return r;
  }

  std::string next_id(const char* kind) { return prefix_ + kind + std::to_string(seq_++); }
  std::string bundle(const char* kind) const { return workdir_ + "/crun-" + kind; }

  expected<double> create_first_output() override {
    auto id = next_id("e");
    stopwatch sw; // from before the fork: a crun user pays fork+exec too
    auto child = spawn({crun_, "run", "--bundle", bundle("echo"), id}, output_mode::pipe, ns_.get());
    if (!child)
      return child.err();
    char first = 0;
    auto n = ::read(child->out.get(), &first, 1);
    double ms = sw.ms();
    auto rest = read_all(child->out.get());
    int rc = wait_child(child->pid);
    auto output = (n == 1 ? std::string(1, first) : std::string()) + rest;
    if (rc != 0 || output != "hi\n")
      return internal_error("crun run " + id + ": exit " + std::to_string(rc) + ", output '" +
                            output.substr(0, 300) + "'");
    return ms;
  }

  status start_exec_sandbox() override {
    exec_id_ = next_id("x");
    auto r = crun({"run", "-d", "--bundle", bundle("idle"), exec_id_});
    return r ? status{} : status{r.err()};
  }

  expected<double> exec_true() override {
    stopwatch sw;
    auto r = crun({"exec", exec_id_, "/bin/true"});
    if (!r)
      return r.err();
    return sw.ms();
  }

  void stop_exec_sandbox() override { (void)crun({"delete", "-f", exec_id_}); }

  std::unique_ptr<bench_worker> make_worker() override {
    return std::make_unique<crun_worker>(*this);
  }

  memory_reading read_memory(const std::vector<std::string>& ids) override {
    memory_reading m;
    m.cgroup_kb = 0;
    for (const auto& id : ids) {
      auto dir = std::string("/sys/fs/cgroup/memory/") + id;
      m.sandbox_kb += sum_proc_mem(cgroup_tree_procs(dir)).pss_kb;
      m.cgroup_kb += std::max(0.0, cgroup_usage_kb(dir));
    }
    return m;
  }

  json notes() override {
    // What the wrapper costs: fork+exec of /bin/true with and without setns.
    std::vector<double> plain, wrapped;
    for (int i = 0; i < 20; ++i) {
      for (int with_ns = 0; with_ns < 2; ++with_ns) {
        stopwatch sw;
        auto r = run({"/bin/true"}, with_ns ? ns_.get() : -1);
        (with_ns ? wrapped : plain).push_back(r ? sw.ms() : 0);
      }
    }
    auto p = summarize(plain).p50, w = summarize(wrapped).p50;
    return {{"wrapper", "each crun command runs in a forked child that setns(2)s into a "
                        "private mount namespace with an empty file bound over " +
                        std::string(cgroup_controllers) + " (made once, not per command)"},
            {"wrapper_overhead_ms_p50", round3(w - p)},
            {"spawn_true_ms_p50", round3(p)},
            {"create_first_output", "crun run (foreground) of /bin/echo hi, timed from fork to "
                                    "the first output byte; crun's own delete after exit untimed"},
            {"exec_true", "crun exec ID /bin/true in a crun run -d container running sleep"},
            {"burst", "crun run -d (returns once the container started); destroy = crun delete -f"},
            {"memory", "PSS of the processes in each container's memory cgroup; cgroup = sum of "
                       "memory.usage_in_bytes of /sys/fs/cgroup/memory/<id>"},
            {"rootfs", "shared busybox dir, writable bind (root.readonly=false)"}};
  }

  void cleanup() override {
    auto list = run({crun_, "list", "-q"}, ns_.get());
    if (!list)
      return;
    size_t pos = 0;
    while (pos < list->output.size()) {
      auto nl = list->output.find('\n', pos);
      auto id = list->output.substr(pos, nl - pos);
      if (id.rfind(prefix_, 0) == 0)
        (void)crun({"delete", "-f", id});
      pos = nl == std::string::npos ? list->output.size() : nl + 1;
    }
  }

 private:
  std::string crun_;
  std::string workdir_;
  sys::unique_fd ns_;
  std::string prefix_;
  std::atomic<int> seq_{0};
  std::string exec_id_;
};

expected<std::string> crun_worker::create_idle() {
  auto id = t_.next_id("b");
  auto r = t_.crun({"run", "-d", "--bundle", t_.bundle("idle"), id});
  if (!r)
    return r.err();
  return id;
}

status crun_worker::destroy(const std::string& id) {
  auto r = t_.crun({"delete", "-f", id});
  return r ? status{} : status{r.err()};
}

} // namespace

expected<std::unique_ptr<bench_target>> make_crun_target(const std::string& workdir,
                                                         const std::string& rootfs) {
  auto exe = find_exe("crun");
  if (exe.empty())
    return unavailable("prepare crun: crun not found in PATH");
  if (auto st = write_bundle(exe, workdir + "/crun-echo", rootfs, {"/bin/echo", "hi"}); !st)
    return st.err();
  if (auto st = write_bundle(exe, workdir + "/crun-idle", rootfs, {"/bin/sleep", "1000000"}); !st)
    return st.err();
  auto empty = workdir + "/empty";
  std::ofstream(empty).flush();
  auto ns = make_patched_mount_ns(empty, cgroup_controllers);
  if (!ns)
    return ns.err();
  auto t = std::make_unique<crun_target>(exe, workdir, std::move(*ns));
  if (auto probe = t->create_first_output(); !probe)
    return error{probe.err().code, "probe crun: " + probe.err().message};
  return std::unique_ptr<bench_target>(std::move(t));
}

} // namespace dsec::bench
