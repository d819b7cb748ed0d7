// CPU classes on real cgroups and real tasks (backends/container/cpu_class):
// the class table, the tasks-file parser, and apply_cpu_class() moving a
// live two-thread process and its cgroup to batch and back.
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "backends/container/cpu_class.hpp"
#include "sys/cgroup.hpp"
#include "sys/fs.hpp"

using namespace dsec;

namespace {

int policy_of(pid_t tid) {
  std::ifstream f("/proc/" + std::to_string(tid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  auto rest = s.substr(s.rfind(')') + 2);
  std::istringstream in(rest);
  std::string field;
  for (int i = 3; i <= 41 && in >> field; ++i) {
  }
  return std::stoi(field);
}

int64_t knob(const std::string& dir, const char* name) {
  auto v = sys::read_file(dir + "/" + name);
  return v ? std::stoll(*v) : -1;
}

} // namespace

TEST_CASE("cpu class table", "[cpu_class]") {
  auto b = backends::cpu_class_params_of("batch");
  REQUIRE(b);
  CHECK(b->policy == SCHED_IDLE);
  CHECK(b->idle);
  CHECK(b->shares == 2);
  auto l = backends::cpu_class_params_of("latency");
  REQUIRE(l);
  CHECK(l->policy == SCHED_OTHER);
  CHECK(!l->idle);
  CHECK(l->shares == 1024);
  CHECK(!backends::cpu_class_params_of("idle"));
  CHECK(!backends::cpu_class_params_of(""));
}

TEST_CASE("tasks files parse to ids", "[cpu_class]") {
  using v = std::vector<pid_t>;
  CHECK(backends::parse_task_ids("") == v{});
  CHECK(backends::parse_task_ids("1\n22\n333\n") == v{1, 22, 333});
  CHECK(backends::parse_task_ids("4\n\n5") == v{4, 5});
  CHECK(backends::parse_task_ids("7\nx\n8\n") == v{7});
  CHECK(backends::parse_task_ids("-1\n") == v{});
  CHECK(backends::parse_task_ids("12345678901\n") == v{});
}

TEST_CASE("apply_cpu_class moves every task and the group to batch and back", "[cpu_class]") {
  if (::geteuid() != 0) {
    WARN("not root: cgroup part skipped");
    return;
  }
  auto rel = "dsec-it/cpuclass-" + std::to_string(::getpid());
  auto cg = sys::create_cgroup_v1("/sys/fs/cgroup", rel);
  REQUIRE(cg);
  auto dir = backends::cpu_dir_of(**cg);
  REQUIRE(dir == "/sys/fs/cgroup/cpu/" + rel);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Two threads, so the walk must cover threads, not just processes.
    std::thread t([] { ::pause(); });
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  REQUIRE((*cg)->add_process(child));
  auto tids = backends::parse_task_ids(*sys::read_file(dir + "/tasks"));
  CHECK(tids.size() == 2);

  REQUIRE(backends::apply_cpu_class(dir, "batch"));
  for (auto t : tids)
    CHECK(policy_of(t) == SCHED_IDLE);
  CHECK(knob(dir, "cpu.shares") <= 3);
  bool has_idle = sys::exists(dir + "/cpu.idle");
  if (has_idle)
    CHECK(knob(dir, "cpu.idle") == 1);
  // Again: an idle group refuses shares; applying the same class still works.
  CHECK(backends::apply_cpu_class(dir, "batch"));

  REQUIRE(backends::apply_cpu_class(dir, "latency"));
  for (auto t : tids)
    CHECK(policy_of(t) == SCHED_OTHER);
  CHECK(knob(dir, "cpu.shares") == 1024);
  if (has_idle)
    CHECK(knob(dir, "cpu.idle") == 0);
  CHECK(!backends::apply_cpu_class(dir, "fast"));

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK((*cg)->remove());
  sys::prune_cgroup_v1("/sys/fs/cgroup", rel);
}
