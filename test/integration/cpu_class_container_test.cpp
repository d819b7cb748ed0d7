// CPU classes on real container sandboxes (container_backend + cpu_class):
// a batch sandbox's init, its execs and what they fork later all run
// SCHED_IDLE in the sandbox's cpu group under the idle dsec-batch/<node>
// (its other controllers stay under dsec/<node>); set_cpu_class moves the
// group and every task to latency and back; destroy and a failed create
// leave no group in either place.
#include "container_fixture.hpp"

#include "backends/policy/cpu_class.hpp"

namespace {

const std::string cpu_root = "/sys/fs/cgroup/cpu";

int policy_of(pid_t tid) {
  auto s = sys::read_file("/proc/" + std::to_string(tid) + "/stat");
  if (!s)
    return -1;
  std::istringstream in(s->substr(s->rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 41 && in >> field; ++i) {
  }
  return std::stoi(field);
}

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

std::vector<pid_t> tasks_of(const std::string& cpu_dir) {
  auto t = sys::read_file(cpu_dir + "/tasks");
  return t ? backends::parse_task_ids(*t) : std::vector<pid_t>{};
}

/// The host pid of the task in `cpu_dir` whose argv is exactly `argv`.
pid_t find_task(const std::string& cpu_dir, const std::string& argv) {
  for (int i = 0; i < 200; ++i) {
    for (auto t : tasks_of(cpu_dir))
      if (auto c = sys::read_file("/proc/" + std::to_string(t) + "/cmdline"); c && *c == argv)
        return t;
    std::this_thread::sleep_for(milliseconds(25));
  }
  return -1;
}

int exec_policy(backends::sandbox& sb) {
  auto r = run_sh(sb, "cat /proc/self/stat");
  std::istringstream in(r.stdout_data.substr(r.stdout_data.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 41 && in >> field; ++i) {
  }
  return std::stoi(field);
}

struct destroy_at_exit {
  std::shared_ptr<backends::sandbox> sb;
  ~destroy_at_exit() {
    (void)sb->destroy();
    sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec-batch/" + container_fixture::node_id);
  }
};

} // namespace

TEST_CASE("container: batch runs every process SCHED_IDLE under dsec-batch, and moves back",
          "[container][cpu_class]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.cpu = 1;
  spec.cpu_class = "batch";
  auto sb = make(spec);
  destroy_at_exit guard{sb};
  pid_t init = sb->init_pid();
  auto cpu_rel = cgroup_of(init, "cpu"), mem_rel = cgroup_of(init, "memory");
  auto top = "/dsec-batch/" + container_fixture::node_id + "/";
  REQUIRE(cpu_rel.rfind(top, 0) == 0);
  auto id = cpu_rel.substr(top.size());
  CHECK(mem_rel == "/dsec/" + container_fixture::node_id + "/" + id);
  auto batch = cpu_root + cpu_rel, latency = cpu_root + mem_rel;
  CHECK(!sys::exists(latency));
  CHECK(policy_of(init) == SCHED_IDLE);
  CHECK(exec_policy(*sb) == SCHED_IDLE);
  // A process started now that forks later.
  run_sh(*sb, "(while [ ! -e /tmp/go ]; do sleep 0.05; done; exec sleep 301) >/dev/null 2>&1 &");
  for (auto t : tasks_of(batch))
    CHECK(policy_of(t) == SCHED_IDLE);
  run_sh(*sb, "touch /tmp/go");
  pid_t late = find_task(batch, std::string{"sleep\0" "301\0", 10});
  REQUIRE(late > 0);
  CHECK(policy_of(late) == SCHED_IDLE);
  CHECK(cgroup_of(late, "cpu") == cpu_rel);

  REQUIRE(sb->set_cpu_class("latency"));
  CHECK(!sys::exists(batch));
  CHECK(cgroup_of(init, "cpu") == mem_rel);
  CHECK(cgroup_of(late, "cpu") == mem_rel);
  CHECK(cgroup_of(init, "memory") == mem_rel);
  for (auto t : tasks_of(latency))
    CHECK(policy_of(t) == SCHED_OTHER);
  CHECK(exec_policy(*sb) == SCHED_OTHER);
  auto quota = sys::read_file(latency + "/cpu.cfs_quota_us");
  REQUIRE(quota);
  CHECK(std::stoll(*quota) == 100000); // cpu = 1 survived both moves

  REQUIRE(sb->set_cpu_class("batch"));
  CHECK(!sys::exists(latency));
  CHECK(cgroup_of(late, "cpu") == cpu_rel);
  CHECK(policy_of(late) == SCHED_IDLE);
  REQUIRE(sb->destroy());
  CHECK(!sys::exists(batch));
  CHECK(!sys::exists(latency));
}

TEST_CASE("container: a batch create that fails leaves no cpu group", "[container][cpu_class]") {
  if (!is_root())
    return;
  sandbox_spec spec;
  spec.cpu_class = "batch";
  spec.protect.readonly = {"/no/such/dir"}; // init refuses it after the cgroups exist
  auto p = w().params(spec);
  auto r = w().backend->create(p);
  REQUIRE(!r);
  CHECK(!sys::exists(cpu_root + "/dsec-batch/" + container_fixture::node_id + "/" + p.id));
  CHECK(!sys::exists(cpu_root + "/dsec/" + container_fixture::node_id + "/" + p.id));
  CHECK(!sys::exists("/sys/fs/cgroup/memory/dsec/" + container_fixture::node_id + "/" + p.id));
  sys::prune_cgroup_v1("/sys/fs/cgroup", "dsec-batch/" + container_fixture::node_id);
}
