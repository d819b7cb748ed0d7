// CPU classes: cgroup knobs and per-task scheduling policy (cpu_class.hpp).
#include "backends/policy/cpu_class.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>

#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

// A task list that keeps growing for this many passes belongs to a fork
// loop; every task seen so far is set, and the new ones inherited the
// policy from a parent that was already set (or will be seen next call).
constexpr int max_passes = 64;
/// The pause before the pass that confirms no task is left (see
/// set_until_stable): long enough for a fork in flight to land on a busy
/// 2-core node, short enough not to show in a class change or a pause.
constexpr long settle_pause_ns = 2'000'000;

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

/// Sets every task `list()` gives until a pass finds none it had not set,
/// twice in a row, settle_pause apart: a task whose fork began before its
/// parent's policy changed copies the old policy, and shows in the list only
/// when its fork ends (a window that widens on a loaded node).
template <class List>
status set_until_stable(List list, int policy) {
  std::set<pid_t> done;
  bool settled = false;
  for (int pass = 0; pass < max_passes; ++pass) {
    bool fresh = false;
    for (pid_t tid : list()) {
      if (!done.insert(tid).second)
        continue;
      fresh = true;
      if (auto st = set_policy(tid, policy); !st)
        return st;
    }
    if (fresh) {
      settled = false;
      continue;
    }
    if (settled)
      return {};
    settled = true;
    struct timespec pause = {0, settle_pause_ns};
    ::nanosleep(&pause, nullptr);
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

/// Every subdirectory name of `dir` ("." entries skipped).
std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return out;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.' && e->d_type == DT_DIR)
      out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

/// Made over a minute ago: never a group a live node is setting up now.
bool older_than_a_minute(const std::string& dir) {
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && ::time(nullptr) - st.st_ctime > 60;
}

/// Removes the cpu groups that nodes killed with -9 left (rmdir refuses a
/// group with tasks or children, so a live one is never hit):
/// dsec/<node>/_node groups older than a minute, then their parent once
/// empty; empty dsec-batch/<node>/<id> groups (this node's at any age: it
/// has not made any yet, and recovered sandboxes hold tasks; others' older
/// than a minute, as a live node's paused microVM leaves its group empty
/// for a while and makes it again on resume); dsec-batch/<node> of a node
/// with no _node group (not running); dsec-batch once empty.
void prune_stale_node_groups(const std::string& cpu_root, const std::string& own_node) {
  auto top = cpu_root + "/dsec";
  for (auto& n : subdirs(top)) {
    auto node = top + "/" + n, own = node + "/" + node_cpu_placement::dir_name;
    if (older_than_a_minute(own) && ::rmdir(own.c_str()) == 0)
      ::rmdir(node.c_str()); // busy while that node's sandboxes outlive it
  }
  auto batch = cpu_root + "/" + batch_top;
  for (auto& n : subdirs(batch)) {
    auto node = batch + "/" + n;
    for (auto& id : subdirs(node))
      if (n == own_node || older_than_a_minute(node + "/" + id))
        ::rmdir((node + "/" + id).c_str());
    if (n != own_node && !sys::exists(top + "/" + n + "/" + node_cpu_placement::dir_name))
      ::rmdir(node.c_str());
  }
  ::rmdir(batch.c_str());
}

} // namespace

namespace {

/// Moves every process listed in `from`/cgroup.procs into `to` (cpu
/// controller), re-reading until none is left; exited ones are skipped.
status evacuate(const std::string& from, const std::string& to) {
  for (int pass = 0; pass < max_passes; ++pass) {
    auto text = sys::read_file(from + "/cgroup.procs");
    if (!text)
      return text.err().code == errc::not_found ? status{} : status{text.err()};
    auto ids = parse_task_ids(*text);
    if (ids.empty())
      return {};
    for (pid_t pid : ids)
      if (auto st = write_knob(to + "/cgroup.procs", std::to_string(pid));
          !st && ::kill(pid, 0) == 0)
        return st;
  }
  return {};
}

} // namespace

node_cpu_placement::node_cpu_placement(const std::string& cgroup_root,
                                       const std::string& node_id) {
  auto cpu_root = cgroup_root + "/cpu";
  root_ = cpu_root;
  if (!sys::exists(cpu_root + "/cpu.shares"))
    return; // no v1 cpu controller: nothing to be beside
  node_ = node_id;
  prune_stale_node_groups(cpu_root, node_id);
  auto dir = cpu_root + "/dsec/" + node_id + "/" + dir_name;
  back_ = own_cpu_group(cpu_root);
  if (auto st = sys::make_dirs(dir); !st) {
    err_ = st.err();
    return;
  }
  // Weight first, so the node never runs a moment at a sandbox's weight. A
  // host that refuses it still gets a node (at the default 1024).
  (void)write_knob(dir + "/cpu.shares", std::to_string(node_cpu_placement::node_shares));
  if (auto st = write_knob(dir + "/cgroup.procs", std::to_string(::getpid())); !st) {
    err_ = st.err();
    ::rmdir(dir.c_str());
    return;
  }
  dir_ = dir;
}

void node_cpu_placement::leave() {
  if (left_ || node_.empty())
    return;
  left_ = true;
  if (!dir_.empty()) {
    // cgroup.procs moves every thread of the process at once (v1).
    if (!write_knob(back_ + "/cgroup.procs", std::to_string(::getpid())))
      (void)write_knob(root_ + "/cgroup.procs", std::to_string(::getpid()));
    // What the node started and what outlives it (the lazy-read daemon, a
    // QEMU still exiting) goes where the node came from, so _node and
    // dsec/<node> do not stay behind (the quick start's node left them).
    for (int i = 0; i < 100 && ::rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i) {
      (void)evacuate(dir_, sys::exists(back_ + "/cgroup.procs") ? back_ : root_);
      ::usleep(10000);
    }
    dir_.clear();
  }
  // dsec/<node> and dsec-batch/<node> too, once they hold no sandbox (one
  // rmdir: EBUSY while a sandbox outlives the node, which a restarted node
  // adopts), and the shared tops with the host's last dsec node.
  for (auto* top : {"dsec", batch_top}) {
    ::rmdir((root_ + "/" + top + "/" + node_).c_str());
    ::rmdir((root_ + "/" + top).c_str());
  }
}

// -- where a class puts a sandbox ---------------------------------------------


std::string class_cpu_rel(const std::string& node_id, const std::string& id,
                          const std::string& cls) {
  return std::string{cls == "batch" ? batch_top : "dsec"} + "/" + node_id + "/" + id;
}

expected<cpu_place> parse_cpu_dir(const std::string& cpu_dir) {
  // <cgroup root>/cpu/<top>/<node>/<id>: the last four slashes.
  size_t at[4], end = cpu_dir.size();
  for (auto& a : at) {
    a = end == 0 ? std::string::npos : cpu_dir.rfind('/', end - 1);
    if (a == std::string::npos || a + 1 >= end)
      return invalid_argument("cpu group " + cpu_dir + ": not <root>/cpu/dsec[-batch]/<node>/<id>");
    end = a;
  }
  auto part = [&](int i) { return cpu_dir.substr(at[i] + 1, at[i - 1] - at[i] - 1); };
  auto top = part(2);
  if (part(3) != "cpu" || (top != "dsec" && top != batch_top))
    return invalid_argument("cpu group " + cpu_dir + ": not <root>/cpu/dsec[-batch]/<node>/<id>");
  return cpu_place{cpu_dir.substr(0, at[3]), part(1), cpu_dir.substr(at[0] + 1),
                   top == batch_top};
}

expected<std::string> prepare_class_cpu_dir(const std::string& cgroup_root,
                                            const std::string& node_id,
                                            const std::string& id, const std::string& cls) {
  auto p = cpu_class_params_of(cls);
  if (!p)
    return p.err();
  auto rel = class_cpu_rel(node_id, id, cls);
  auto cpu_root = cgroup_root + "/cpu";
  if (!p->idle || !sys::exists(cpu_root + "/cpu.shares"))
    return rel;
  auto top = cpu_root + "/" + batch_top, dir = cpu_root + "/" + rel;
  status st;
  // Another node's last stop may rmdir an empty parent between our mkdirs.
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = sys::make_dirs(top);
    if (st)
      st = apply_cpu_knobs(top, *p);
    if (st)
      st = sys::make_dirs(dir);
    if (st)
      st = apply_cpu_knobs(dir, *p);
    if (st)
      return rel;
  }
  return error{st.err().code, "prepare batch cpu group " + dir + ": " + st.err().message};
}

status move_cgroup_to_class(sys::cgroup& cg, const std::string& cls) {
  auto p = cpu_class_params_of(cls);
  if (!p)
    return p.err();
  auto dir = cpu_dir_of(cg);
  auto place = parse_cpu_dir(dir);
  // A group outside the two places (tests) changes class where it is.
  if (place && place->batch != p->idle) {
    auto rel = prepare_class_cpu_dir(place->cgroup_root, place->node_id, place->id, cls);
    if (!rel)
      return error{rel.err().code, "set cpu class " + cls + ": " + rel.err().message};
    if (auto st = cg.move_cpu(*rel); !st)
      return error{st.err().code, "set cpu class " + cls + ": " + st.err().message};
  }
  return apply_cpu_class(cpu_dir_of(cg), cls);
}

status freeze_in_class(sys::cgroup& cg) {
  auto place = parse_cpu_dir(cpu_dir_of(cg));
  bool batch = place && place->batch;
  if (batch)
    if (auto st = move_cgroup_to_class(cg, "latency"); !st)
      return st;
  auto st = cg.freeze(true);
  if (batch)
    if (auto back = move_cgroup_to_class(cg, "batch"); !back && st)
      st = back;
  return st;
}

std::unique_ptr<sys::cgroup> open_sandbox_cgroup(const std::string& cgroup_root,
                                                 const std::string& node_id,
                                                 const std::string& id) {
  auto rel = class_cpu_rel(node_id, id, "latency"), batch = class_cpu_rel(node_id, id, "batch");
  auto cpu = cgroup_root + "/cpu/";
  if (!sys::exists(cpu + batch))
    return sys::open_cgroup_v1(cgroup_root, rel);
  if (!sys::exists(cpu + rel))
    return sys::open_cgroup_v1(cgroup_root, rel, batch);
  // Both: the node died moving it. On to batch, where a class change of
  // either direction had put part of it (batch can only slow the sandbox).
  // If that fails the group stays at the latency place, what is left in the
  // batch one with it until the node's next start prunes it.
  auto cg = sys::open_cgroup_v1(cgroup_root, rel);
  (void)cg->move_cpu(batch);
  return cg;
}

status place_process_in_class(pid_t pid, const std::string& cgroup_root,
                              const std::string& node_id, const std::string& id,
                              const std::string& cls) {
  auto p = cpu_class_params_of(cls);
  if (!p)
    return p.err();
  auto cpu_root = cgroup_root + "/cpu";
  auto batch_dir = cpu_root + "/" + class_cpu_rel(node_id, id, "batch");
  auto pid_text = std::to_string(pid);
  if (!sys::exists(cpu_root + "/cpu.shares")) {
    // No v1 cpu controller: the policy alone.
  } else if (p->idle) {
    auto rel = prepare_class_cpu_dir(cgroup_root, node_id, id, cls);
    if (!rel)
      return rel.err();
    if (auto st = write_knob(batch_dir + "/cgroup.procs", pid_text); !st)
      return error{st.err().code, "set cpu class " + cls + " of process " + pid_text + ": " +
                                    st.err().message};
  } else if (sys::exists(batch_dir)) {
    // QEMU's children too (a save's `cat`): they would keep the group busy.
    if (auto st = evacuate(batch_dir, own_cpu_group(cpu_root)); !st)
      return error{st.err().code, "set cpu class " + cls + " of process " + pid_text + ": " +
                                    st.err().message};
    remove_process_cpu_dir(cgroup_root, node_id, id);
  }
  return apply_cpu_policy_to_process(pid, *p);
}

void remove_process_cpu_dir(const std::string& cgroup_root, const std::string& node_id,
                            const std::string& id) {
  auto dir = cgroup_root + "/cpu/" + class_cpu_rel(node_id, id, "batch");
  if (!sys::exists(dir))
    return;
  // What QEMU left running (children on their way out) exits at normal pace
  // beside the node rather than at SCHED_IDLE's, and no longer holds the group.
  (void)evacuate(dir, own_cpu_group(cgroup_root + "/cpu"));
  // EBUSY while the tasks of a process that was just killed finish exiting.
  for (int i = 0; i < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i)
    ::usleep(10000);
}

} // namespace dsec::backends
