// CPU classes: cgroup knobs and per-task scheduling policy (cpu_class.hpp),
// and container_sandbox::set_cpu_class() on top of them.
#include "backends/container/cpu_class.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>

#include "backends/container/container_sandbox.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

// A task list that keeps growing for this many passes belongs to a fork
// loop; every task seen so far is set, and the new ones inherited the
// policy from a parent that was already set (or will be seen next call).
constexpr int max_passes = 64;

status write_knob(const std::string& path, const std::string& value) {
  sys::unique_fd fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("open", path, errno);
  if (::write(fd.get(), value.data(), value.size()) < 0)
    return sys_error("write " + value + " to", path, errno);
  return {};
}

/// Sets one task; a task that is gone already is no error.
status set_policy(pid_t tid, int policy) {
  sched_param sp{};
  sp.sched_priority = 0;
  if (::sched_setscheduler(tid, policy, &sp) == 0 || errno == ESRCH)
    return {};
  return sys_error("sched_setscheduler " + std::string{policy == SCHED_IDLE ? "SCHED_IDLE"
                                                                            : "SCHED_OTHER"}
                     + " of task",
                   std::to_string(tid), errno);
}

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> out;
  auto dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return out;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (v > 0 && end && *end == 0)
      out.push_back(static_cast<pid_t>(v));
  }
  ::closedir(d);
  return out;
}

/// Sets every task `list()` gives until a pass finds none it had not set.
template <class List>
status set_until_stable(List list, int policy) {
  std::set<pid_t> done;
  for (int pass = 0; pass < max_passes; ++pass) {
    bool fresh = false;
    for (pid_t tid : list()) {
      if (!done.insert(tid).second)
        continue;
      fresh = true;
      if (auto st = set_policy(tid, policy); !st)
        return st;
    }
    if (!fresh)
      return {};
  }
  return {};
}

} // namespace

expected<cpu_class_params> cpu_class_params_of(const std::string& cls) {
  if (cls == "latency")
    return cpu_class_params{1024, false, SCHED_OTHER};
  if (cls == "batch")
    return cpu_class_params{2, true, SCHED_IDLE};
  return invalid_argument("cpu_class: must be \"latency\" or \"batch\", got \""
                          + cls.substr(0, 200) + "\"");
}

std::vector<pid_t> parse_task_ids(std::string_view text) {
  std::vector<pid_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos)
      nl = text.size();
    auto line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty())
      continue;
    if (line.size() > 9 || line.find_first_not_of("0123456789") != std::string_view::npos)
      break;
    long v = std::strtol(std::string{line}.c_str(), nullptr, 10);
    if (v <= 0)
      break;
    out.push_back(static_cast<pid_t>(v));
  }
  return out;
}

std::string cpu_dir_of(const sys::cgroup& cg) {
  for (auto& p : cg.paths())
    if (p.find("/cpu/") != std::string::npos)
      return p;
  return {};
}

status apply_cpu_knobs(const std::string& cpu_dir, const cpu_class_params& p) {
  auto idle_path = cpu_dir + "/cpu.idle";
  bool has_idle = sys::exists(idle_path);
  auto shares = cpu_dir + "/cpu.shares";
  if (p.idle) {
    // Shares first: an idle group refuses them (EINVAL) and weighs the
    // minimum anyway.
    auto now = has_idle ? sys::read_file(idle_path) : expected<std::string>{std::string{"0"}};
    bool already_idle = now && !now->empty() && (*now)[0] == '1';
    if (!already_idle)
      if (auto st = write_knob(shares, std::to_string(p.shares)); !st)
        return st;
    return has_idle ? write_knob(idle_path, "1") : status{};
  }
  // Leaving idle resets shares to 1024; write them after it.
  if (has_idle)
    if (auto st = write_knob(idle_path, "0"); !st)
      return st;
  return write_knob(shares, std::to_string(p.shares));
}

status apply_cpu_policy(const std::string& cpu_dir, const cpu_class_params& p) {
  auto tasks = cpu_dir + "/tasks";
  status read_err;
  auto st = set_until_stable([&] {
    auto text = sys::read_file(tasks);
    if (!text) {
      read_err = text.err();
      return std::vector<pid_t>{};
    }
    return parse_task_ids(*text);
  }, p.policy);
  if (!st)
    return st;
  return read_err;
}

status apply_cpu_policy_to_process(pid_t pid, const cpu_class_params& p) {
  return set_until_stable([pid] { return threads_of(pid); }, p.policy);
}

status apply_cpu_class(const std::string& cpu_dir, const std::string& cls) {
  auto p = cpu_class_params_of(cls);
  if (!p)
    return p.err();
  if (cpu_dir.empty())
    return internal_error("set cpu class " + cls + ": the sandbox has no cpu cgroup");
  if (auto st = apply_cpu_knobs(cpu_dir, *p); !st)
    return error{st.err().code, "set cpu class " + cls + ": " + st.err().message};
  if (auto st = apply_cpu_policy(cpu_dir, *p); !st)
    return error{st.err().code, "set cpu class " + cls + ": " + st.err().message};
  return {};
}

// -- the node's own place -------------------------------------------------------

namespace {

/// The cpu controller's directory of this process (from /proc/self/cgroup).
std::string own_cpu_group(const std::string& cpu_root) {
  auto text = sys::read_file("/proc/self/cgroup");
  if (!text)
    return cpu_root;
  size_t pos = 0;
  while (pos < text->size()) {
    auto nl = text->find('\n', pos);
    auto line = text->substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text->size() : nl + 1;
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      continue;
    auto ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctrls.find(",cpu,") != std::string::npos)
      return cpu_root + (line.substr(b + 1) == "/" ? "" : line.substr(b + 1));
  }
  return cpu_root;
}

/// Removes the cpu groups that nodes killed with -9 left: dsec/<node>/_node
/// dirs with no task (rmdir refuses a group with tasks or children), made
/// over a minute ago (so never one a node is joining right now), then their
/// parent once empty.
void prune_stale_node_groups(const std::string& cpu_root) {
  auto top = cpu_root + "/dsec";
  DIR* d = ::opendir(top.c_str());
  if (!d)
    return;
  time_t now = ::time(nullptr);
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || e->d_type != DT_DIR)
      continue;
    auto node = top + "/" + e->d_name, own = node + "/" + node_cpu_placement::dir_name;
    struct stat st;
    if (::stat(own.c_str(), &st) == 0 && now - st.st_ctime > 60 && ::rmdir(own.c_str()) == 0)
      ::rmdir(node.c_str()); // busy while that node's sandboxes outlive it
  }
  ::closedir(d);
}

} // namespace

node_cpu_placement::node_cpu_placement(const std::string& cgroup_root,
                                       const std::string& node_id) {
  auto cpu_root = cgroup_root + "/cpu";
  root_ = cpu_root;
  if (!sys::exists(cpu_root + "/cpu.shares"))
    return; // no v1 cpu controller: nothing to be beside
  prune_stale_node_groups(cpu_root);
  auto dir = cpu_root + "/dsec/" + node_id + "/" + dir_name;
  back_ = own_cpu_group(cpu_root);
  if (auto st = sys::make_dirs(dir); !st) {
    err_ = st.err();
    return;
  }
  if (auto st = write_knob(dir + "/cgroup.procs", std::to_string(::getpid())); !st) {
    err_ = st.err();
    ::rmdir(dir.c_str());
    return;
  }
  dir_ = dir;
}

void node_cpu_placement::leave() {
  if (dir_.empty())
    return;
  // cgroup.procs moves every thread of the process at once (v1).
  if (!write_knob(back_ + "/cgroup.procs", std::to_string(::getpid())))
    (void)write_knob(root_ + "/cgroup.procs", std::to_string(::getpid()));
  for (int i = 0; i < 100 && ::rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i)
    ::usleep(10000);
  // dsec/<node> too, once it holds no sandbox (one rmdir: EBUSY while a
  // sandbox outlives the node, which a restarted node adopts).
  auto parent = dir_.substr(0, dir_.rfind('/'));
  ::rmdir(parent.c_str());
  ::rmdir((root_ + "/dsec").c_str()); // the host's last dsec node
  dir_.clear();
}

// -- the container sandbox's side -------------------------------------------

status container_sandbox::set_cpu_class(const std::string& cls) {
  // destroy_m_: pause, resume and destroy take it too, so a class change
  // never races a freeze or a teardown.
  std::lock_guard<std::mutex> once(destroy_m_);
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroyed_ || dead_)
      return unavailable("set cpu class of " + parts_.id + ": sandbox is gone");
  }
  if (!parts_.cgroup)
    return internal_error("set cpu class of " + parts_.id + ": no cgroup");
  if (auto st = apply_cpu_class(cpu_dir_of(*parts_.cgroup), cls); !st)
    return error{st.err().code, parts_.id + ": " + st.err().message};
  return {};
}

} // namespace dsec::backends
