// bubblewrap as a system under test:
//   bwrap --unshare-all --die-with-parent --bind ROOTFS / --proc /proc --dev /dev CMD
// create + first output runs /bin/echo hi, timed to the first output byte. An
// idle sandbox runs `sh -c 'echo ready; exec sleep …'` and counts as created
// when "ready" arrives (bwrap has no other readiness signal); destroy is
// SIGKILL to the outer bwrap (--die-with-parent takes the rest) plus waitpid.
// bwrap cannot exec into a running sandbox: exec is n/a.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "bench/memory.hpp"
#include "bench/peers.hpp"
#include "bench/spawn.hpp"
#include "bench/stats.hpp"

namespace dsec::bench {

namespace {

using nlohmann::json;

class bwrap_target : public bench_target {
 public:
  bwrap_target(std::string bwrap, std::string rootfs)
    : base_{std::move(bwrap), "--unshare-all", "--die-with-parent", "--bind", std::move(rootfs),
            "/", "--proc", "/proc", "--dev", "/dev"} {}

  [[nodiscard]] std::string name() const override { return "bwrap"; }
  [[nodiscard]] bool supports_exec() const override { return false; }

  /// Starts bwrap running `cmd`; returns the child and the ms to its first output byte.
  expected<std::pair<child_process, std::string>> start(const std::vector<std::string>& cmd,
                                                        double& ms) {
    auto argv = base_;
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    stopwatch sw; // from before the fork, as for crun
    auto child = spawn(argv, output_mode::pipe);
    if (!child)
      return child.err();
    char buf[256];
    auto n = ::read(child->out.get(), buf, sizeof buf);
    ms = sw.ms();
    std::string first = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    return std::pair<child_process, std::string>{std::move(*child), first};
  }

  expected<double> create_first_output() override {
    double ms = 0;
    auto started = start({"/bin/echo", "hi"}, ms);
    if (!started)
      return started.err();
    auto& [child, first] = *started;
    auto output = first + read_all(child.out.get());
    int rc = wait_child(child.pid);
    if (rc != 0 || output != "hi\n")
      return internal_error("bwrap /bin/echo hi: exit " + std::to_string(rc) + ", output '" +
                            output.substr(0, 300) + "'");
    return ms;
  }

  std::unique_ptr<bench_worker> make_worker() override;

  memory_reading read_memory(const std::vector<std::string>& handles) override {
    std::vector<pid_t> roots;
    for (const auto& h : handles)
      roots.push_back(static_cast<pid_t>(std::atoi(h.c_str())));
    memory_reading m;
    m.sandbox_kb = sum_proc_mem(with_descendants(roots)).pss_kb;
    return m;
  }

  json notes() override {
    return {{"create_first_output", "bwrap ... /bin/echo hi, timed from fork to the first "
                                    "output byte; exit untimed"},
            {"exec_true", "n/a: bwrap cannot exec into a running sandbox"},
            {"burst", "bwrap ... sh -c 'echo ready; exec sleep', created when 'ready' arrives; "
                      "destroy = SIGKILL + waitpid"},
            {"memory", "PSS of the outer bwrap, the inner bwrap (pid 1) and sleep; no cgroup"}};
  }

 private:
  std::vector<std::string> base_;
};

class bwrap_worker : public bench_worker {
 public:
  explicit bwrap_worker(bwrap_target& t) : t_(t) {}

  expected<std::string> create_idle() override {
    double ms = 0;
    auto started = t_.start({"/bin/sh", "-c", "echo ready; exec sleep 1000000"}, ms);
    if (!started)
      return started.err();
    auto& [child, first] = *started;
    if (first != "ready\n") {
      ::kill(child.pid, SIGKILL);
      wait_child(child.pid);
      return internal_error("bwrap idle sandbox: expected 'ready', got '" + first + "'");
    }
    return std::to_string(child.pid);
  }

  status destroy(const std::string& handle) override {
    auto pid = static_cast<pid_t>(std::atoi(handle.c_str()));
    if (::kill(pid, SIGKILL) != 0)
      return sys_error("kill bwrap", handle, errno);
    wait_child(pid);
    return {};
  }

 private:
  bwrap_target& t_;
};

std::unique_ptr<bench_worker> bwrap_target::make_worker() {
  return std::make_unique<bwrap_worker>(*this);
}

} // namespace

expected<std::unique_ptr<bench_target>> make_bwrap_target(const std::string& rootfs) {
  auto exe = find_exe("bwrap");
  if (exe.empty())
    return unavailable("prepare bwrap: bwrap not found in PATH");
  auto t = std::make_unique<bwrap_target>(exe, rootfs);
  if (auto probe = t->create_first_output(); !probe)
    return error{probe.err().code, "probe bwrap: " + probe.err().message};
  return std::unique_ptr<bench_target>(std::move(t));
}

} // namespace dsec::bench
