// CPU classes on real cgroups and real tasks (backends/policy/cpu_class):
// the class table, the tasks-file parser, the two places (dsec/<node>/<id>
// and the idle dsec-batch/<node>/<id>), apply_cpu_class() on a live
// two-thread process, cgroup::move_cpu() and move_cgroup_to_class() moving
// it between the places (tasks forked later follow), a restarted node
// finding the group, a lone process (QEMU's case) moved with its children,
// and the node's pruning of stale groups.
#include <catch2/catch.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "backends/policy/cpu_class.hpp"
#include "sys/cgroup.hpp"
#include "sys/fs.hpp"

#include "privilege.hpp"

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

/// The task's path in one v1 hierarchy, from /proc/<tid>/cgroup.
std::string cgroup_of(pid_t tid, const std::string& ctrl) {
  std::ifstream f("/proc/" + std::to_string(tid) + "/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (("," + line.substr(a + 1, b - a - 1) + ",").find("," + ctrl + ",") != std::string::npos)
      return line.substr(b + 1);
  }
  return {};
}

/// A two-thread process that forks one more (pausing) child each time
/// fork_one() asks it to; the child reports its pid. kill() ends them all.
struct family {
  pid_t pid = -1;
  int go = -1, born = -1;

  void start() {
    int ready[2], ask[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(ask) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(ask[1]);
      ::close(ready[0]);
      std::thread t([] { ::pause(); });
      pid_t me = ::getpid();
      (void)!::write(ready[1], &me, sizeof me);
      char c;
      while (::read(ask[0], &c, 1) == 1)
        if (::fork() == 0) {
          me = ::getpid();
          (void)!::write(ready[1], &me, sizeof me);
          ::pause();
          ::_exit(0);
        }
      ::_exit(0);
    }
    ::close(ask[0]);
    ::close(ready[1]);
    go = ask[1];
    born = ready[0];
    pid_t first;
    REQUIRE(::read(born, &first, sizeof first) == sizeof first);
  }

  pid_t fork_one() {
    char c = 1;
    REQUIRE(::write(go, &c, 1) == 1);
    pid_t child = -1;
    REQUIRE(::read(born, &child, sizeof child) == sizeof child);
    kids.push_back(child);
    return child;
  }

  void kill() {
    for (auto k : kids)
      ::kill(k, SIGKILL);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(go);
    ::close(born);
  }

  std::vector<pid_t> kids;
};

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
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
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

TEST_CASE("each class has its place in the cpu hierarchy", "[cpu_class]") {
  CHECK(backends::class_cpu_rel("n1", "n1.a", "latency") == "dsec/n1/n1.a");
  CHECK(backends::class_cpu_rel("n1", "n1.a", "batch") == "dsec-batch/n1/n1.a");
  auto l = backends::parse_cpu_dir("/sys/fs/cgroup/cpu/dsec/n1/n1.a");
  REQUIRE(l);
  CHECK(l->cgroup_root == "/sys/fs/cgroup");
  CHECK(l->node_id == "n1");
  CHECK(l->id == "n1.a");
  CHECK(!l->batch);
  auto b = backends::parse_cpu_dir("/x/cpu/dsec-batch/n1/n1.a");
  REQUIRE(b);
  CHECK(b->cgroup_root == "/x");
  CHECK(b->batch);
  for (auto* bad : {"", "/", "/sys/fs/cgroup/cpu/dsec/n1/", "/sys/fs/cgroup/cpu/dsec-it/a/b",
                    "/sys/fs/cgroup/memory/dsec/n1/n1.a", "cpu/dsec/n1/n1.a", "dsec/n1/n1.a"})
    CHECK(!backends::parse_cpu_dir(bad));
}

TEST_CASE("move_cpu moves every task, and later children are born there", "[cpu_class]") {
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
  auto rel = "dsec-it/move-" + std::to_string(::getpid());
  auto to_rel = "dsec-it-b/move-" + std::to_string(::getpid());
  auto cg = sys::create_cgroup_v1("/sys/fs/cgroup", rel);
  REQUIRE(cg);
  REQUIRE((*cg)->apply({0.5, 0, 0}));
  family fam;
  fam.start();
  REQUIRE((*cg)->add_process(fam.pid));
  pid_t before = fam.fork_one();

  REQUIRE((*cg)->move_cpu(to_rel));
  auto to = "/sys/fs/cgroup/cpu/" + to_rel;
  CHECK(backends::cpu_dir_of(**cg) == to);
  CHECK(!sys::exists("/sys/fs/cgroup/cpu/" + rel));
  CHECK(knob(to, "cpu.cfs_quota_us") == 50000); // the limit came along
  auto tids = backends::parse_task_ids(*sys::read_file(to + "/tasks"));
  CHECK(tids.size() == 3); // two threads and the child
  for (auto t : tids) {
    CHECK(cgroup_of(t, "cpu") == "/" + to_rel);
    CHECK(cgroup_of(t, "memory") == "/" + rel); // the other controllers stay
  }
  CHECK(cgroup_of(before, "cpu") == "/" + to_rel);
  pid_t after = fam.fork_one();
  CHECK(cgroup_of(after, "cpu") == "/" + to_rel);
  // The same place again is nothing to do.
  CHECK((*cg)->move_cpu(to_rel));

  REQUIRE((*cg)->move_cpu(rel));
  CHECK(!sys::exists(to));
  for (auto t : backends::parse_task_ids(*sys::read_file("/sys/fs/cgroup/cpu/" + rel + "/tasks")))
    CHECK(cgroup_of(t, "cpu") == "/" + rel);
  CHECK(!(*cg)->move_cpu("../escape"));

  fam.kill();
  CHECK((*cg)->remove());
  sys::prune_cgroup_v1("/sys/fs/cgroup", rel);
  sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec-it-b");
}

TEST_CASE("a batch sandbox's group moves under the idle dsec-batch and back", "[cpu_class]") {
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
  const std::string root = "/sys/fs/cgroup", node = "it-cpu-" + std::to_string(::getpid());
  const std::string id = node + ".a";
  auto cg = sys::create_cgroup_v1(root, backends::class_cpu_rel(node, id, "latency"));
  REQUIRE(cg);
  family fam;
  fam.start();
  REQUIRE((*cg)->add_process(fam.pid));
  auto batch = root + "/cpu/dsec-batch/" + node + "/" + id;
  auto latency = root + "/cpu/dsec/" + node + "/" + id;

  REQUIRE(backends::move_cgroup_to_class(**cg, "batch"));
  CHECK(backends::cpu_dir_of(**cg) == batch);
  CHECK(!sys::exists(latency));
  bool has_idle = sys::exists(root + "/cpu/cpu.idle");
  if (has_idle) {
    CHECK(knob(root + "/cpu/dsec-batch", "cpu.idle") == 1);
    CHECK(knob(batch, "cpu.idle") == 1);
  }
  for (auto t : backends::parse_task_ids(*sys::read_file(batch + "/tasks"))) {
    CHECK(policy_of(t) == SCHED_IDLE);
    CHECK(cgroup_of(t, "cpu") == "/dsec-batch/" + node + "/" + id);
    CHECK(cgroup_of(t, "memory") == "/dsec/" + node + "/" + id);
  }
  pid_t later = fam.fork_one();
  CHECK(policy_of(later) == SCHED_IDLE); // inherited: forked after the change
  CHECK(cgroup_of(later, "cpu") == "/dsec-batch/" + node + "/" + id);

  // A restarted node finds it there.
  auto again = backends::open_sandbox_cgroup(root, node, id);
  CHECK(backends::cpu_dir_of(*again) == batch);
  // A node that died mid-move left both: the tasks go on to batch.
  REQUIRE(sys::make_dirs(latency));
  {
    std::ofstream(latency + "/cgroup.procs") << later;
  }
  CHECK(cgroup_of(later, "cpu") == "/dsec/" + node + "/" + id);
  auto both = backends::open_sandbox_cgroup(root, node, id);
  CHECK(backends::cpu_dir_of(*both) == batch);
  CHECK(!sys::exists(latency));
  CHECK(cgroup_of(later, "cpu") == "/dsec-batch/" + node + "/" + id);

  REQUIRE(backends::move_cgroup_to_class(**cg, "latency"));
  CHECK(backends::cpu_dir_of(**cg) == latency);
  CHECK(!sys::exists(batch));
  CHECK(knob(latency, "cpu.shares") == 1024);
  for (auto t : backends::parse_task_ids(*sys::read_file(latency + "/tasks"))) {
    CHECK(policy_of(t) == SCHED_OTHER);
    CHECK(cgroup_of(t, "cpu") == "/dsec/" + node + "/" + id);
  }
  CHECK(!backends::move_cgroup_to_class(**cg, "fast"));

  fam.kill();
  CHECK((*cg)->remove());
  sys::prune_cgroup_v1(root, "dsec/" + node);
  sys::prune_cgroup_v1(root, "dsec-batch/" + node);
  CHECK(!sys::exists(root + "/cpu/dsec-batch/" + node));
}

TEST_CASE("a lone process (QEMU) moves to batch with its children and back", "[cpu_class]") {
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
  const std::string root = "/sys/fs/cgroup", node = "it-cpuq-" + std::to_string(::getpid());
  const std::string id = node + ".vm";
  auto mine = cgroup_of(::getpid(), "cpu");
  family fam;
  fam.start();
  REQUIRE(backends::place_process_in_class(fam.pid, root, node, id, "batch"));
  auto rel = "/dsec-batch/" + node + "/" + id;
  CHECK(cgroup_of(fam.pid, "cpu") == rel);
  CHECK(cgroup_of(fam.pid, "memory") == cgroup_of(::getpid(), "memory"));
  for (auto t : backends::parse_task_ids(*sys::read_file(root + "/cpu" + rel + "/tasks")))
    CHECK(policy_of(t) == SCHED_IDLE);
  pid_t child = fam.fork_one(); // as QEMU's `cat` of a save

  REQUIRE(backends::place_process_in_class(fam.pid, root, node, id, "latency"));
  CHECK(cgroup_of(fam.pid, "cpu") == mine); // beside the node (here: this test)
  CHECK(cgroup_of(child, "cpu") == mine);   // the child too: nothing holds the group
  CHECK(!sys::exists(root + "/cpu" + rel));
  CHECK(policy_of(fam.pid) == SCHED_OTHER);

  REQUIRE(backends::place_process_in_class(fam.pid, root, node, id, "batch"));
  fam.kill();
  backends::remove_process_cpu_dir(root, node, id);
  CHECK(!sys::exists(root + "/cpu" + rel));
  backends::remove_process_cpu_dir(root, node, id); // missing is fine
  sys::prune_cgroup_v1(root, "dsec-batch/" + node);
}

TEST_CASE("a starting node prunes stale batch groups; a clean stop removes its own",
          "[cpu_class]") {
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
  const std::string cpu = "/sys/fs/cgroup/cpu", node = "it-cpun-" + std::to_string(::getpid());
  auto mine = cgroup_of(::getpid(), "cpu");
  // A node killed with -9 left an empty batch group of its own, and a node
  // that is gone left its batch parent.
  auto own_stale = cpu + "/dsec-batch/" + node + "/" + node + ".old";
  auto gone = cpu + "/dsec-batch/" + node + "-gone";
  REQUIRE(sys::make_dirs(own_stale));
  REQUIRE(sys::make_dirs(gone));
  {
    backends::node_cpu_placement place{"/sys/fs/cgroup", node};
    REQUIRE(!place.err());
    CHECK(cgroup_of(::getpid(), "cpu") == "/dsec/" + node + "/_node");
    CHECK(!sys::exists(own_stale));
    CHECK(!sys::exists(gone));
    // What the node makes while it runs, gone by the stop.
    REQUIRE(backends::prepare_class_cpu_dir("/sys/fs/cgroup", node, node + ".b", "batch"));
    CHECK(sys::exists(cpu + "/dsec-batch/" + node + "/" + node + ".b"));
    ::rmdir((cpu + "/dsec-batch/" + node + "/" + node + ".b").c_str()); // its destroy
    place.leave();
    CHECK(cgroup_of(::getpid(), "cpu") == mine);
    CHECK(!sys::exists(cpu + "/dsec/" + node));
    CHECK(!sys::exists(cpu + "/dsec-batch/" + node));
  }
}

TEST_CASE("a process the node started and that outlives it does not pin its cpu group",
          "[cpu_class]") {
  if (!test::have_root("needs root to move tasks between cgroups"))
    return;
  const std::string cpu = "/sys/fs/cgroup/cpu", node = "it-cpuo-" + std::to_string(::getpid());
  auto mine = cgroup_of(::getpid(), "cpu");
  pid_t child = -1;
  {
    backends::node_cpu_placement place{"/sys/fs/cgroup", node};
    REQUIRE(!place.err());
    // Started while the node runs in _node (the lazy-read daemon is one).
    child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::pause();
      ::_exit(0);
    }
    CHECK(cgroup_of(child, "cpu") == "/dsec/" + node + "/_node");
    place.leave();
    CHECK(!sys::exists(cpu + "/dsec/" + node));
    CHECK(cgroup_of(child, "cpu") == mine);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}
