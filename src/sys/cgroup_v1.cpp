// cgroup v1 (plus the hybrid host's v2 directory): one directory per
// controller, limits written through the legacy knobs (cpu.cfs_quota_us,
// memory.limit_in_bytes, pids.max), the legacy freezer for pause. kmem knobs
// are deprecated and never written.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sys/cgroup.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::sys {

namespace {

// Controllers a sandbox lives in. cpuset is left out on purpose: a v1
// cpuset child starts with empty cpus/mems and would reject tasks.
constexpr const char* controllers[] = {"cpu", "memory", "pids", "freezer"};

// CPU time comes from the v2 group's cpu.stat (the kernel counts it for
// every v2 group, controllers or not). Only a host without the v2 hierarchy
// gets a cpuacct group per sandbox as well: one v1 group fewer to make,
// join and remove per create (each v1 join also looks the task's new
// css_set up in a host-wide hash that grows with the sandboxes), and one
// group less of kernel memory per sandbox. Groups made by an older node
// still have one, which remove() and prune take too.
constexpr const char* cpu_time_controller = "cpuacct";

// CFS period; 100 ms is the kernel default, so quotas read naturally.
constexpr int64_t cfs_period_us = 100000;

status write_knob(const std::string& path, const std::string& value) {
  unique_fd fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("open", path, errno);
  if (::write(fd.get(), value.data(), value.size()) < 0)
    return sys_error("write " + value + " to", path, errno);
  return {};
}

int64_t read_counter(const std::string& path, const std::string& field) {
  auto text = read_file(path);
  if (!text)
    return 0;
  if (field.empty())
    return std::atoll(text->c_str());
  auto pos = text->find(field + " ");
  return pos == std::string::npos ? 0 : std::atoll(text->c_str() + pos + field.size() + 1);
}

// rmdir, retried while the kernel still counts exiting tasks (EBUSY).
// Bounded at ~1 s: a group that stays busy longer holds a live process and
// the caller must kill it first.
status remove_dir(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT)
      return {};
    if (errno != EBUSY || attempt >= 1000)
      return sys_error("rmdir", path, errno);
    timespec ts{0, 1000000};
    ::nanosleep(&ts, nullptr);
  }
}

bool valid_rel(const std::string& rel) {
  return !rel.empty() && rel[0] != '/' && rel.find("..") == std::string::npos;
}

class cgroup_v1 final : public cgroup {
 public:
  cgroup_v1(std::string root, std::string rel, std::string cpu_rel)
    : root_(std::move(root)), rel_(std::move(rel)),
      cpu_rel_(cpu_rel.empty() ? rel_ : std::move(cpu_rel)) {
    for (auto c : controllers)
      dirs_.push_back(dir(c));
    if (exists(root_ + "/unified/cgroup.procs"))
      unified_ = root_ + "/unified/" + rel_;
    else
      dirs_.push_back(dir(cpu_time_controller));
  }

  status make() {
    for (auto& d : all_dirs()) {
      if (auto st = make_dirs(d); !st) {
        (void)remove();
        return st;
      }
    }
    return {};
  }

  status apply(const cgroup_limits& l) override {
    // Every write of cfs_period_us or cfs_quota_us makes the kernel check
    // the bandwidth of every cpu group on the host (tg_set_bandwidth walks
    // them all, under a host-wide mutex): O(sandboxes) per write. A new
    // group already has the default period and no quota, so each knob is
    // written only when it must change (measured at 3,200 groups: 67 us a
    // write against 23 us at none).
    auto cpu = dir("cpu");
    auto period_knob = cpu + "/cpu.cfs_period_us", quota_knob = cpu + "/cpu.cfs_quota_us";
    if (read_counter(period_knob, "") != cfs_period_us)
      if (auto st = write_knob(period_knob, std::to_string(cfs_period_us)); !st)
        return st;
    int64_t quota = l.cpu > 0 ? std::max<int64_t>(1000, std::llround(l.cpu * cfs_period_us)) : -1;
    if (read_counter(quota_knob, "") != quota)
      if (auto st = write_knob(quota_knob, std::to_string(quota)); !st)
        return st;
    if (l.memory_bytes > 0)
      if (auto st = write_memory_limit(l.memory_bytes); !st)
        return st;
    return write_knob(dir("pids") + "/pids.max", l.pids > 0 ? std::to_string(l.pids) : "max");
  }

  // memory.limit_in_bytes and, where swap is accounted, memory.memsw.
  // limit_in_bytes (RAM + swap) to the same value. The kernel keeps
  // limit <= memsw at every write: raising, memsw goes first; lowering, the
  // limit goes first.
  status write_memory_limit(int64_t bytes) {
    auto m = dir("memory");
    auto limit = m + "/memory.limit_in_bytes", memsw = m + "/memory.memsw.limit_in_bytes";
    auto value = std::to_string(bytes);
    if (!exists(memsw))
      return write_knob(limit, value);
    bool raising = bytes >= read_counter(memsw, "");
    if (auto st = write_knob(raising ? memsw : limit, value); !st)
      return st;
    return write_knob(raising ? limit : memsw, value);
  }

  cgroup_usage usage() const override {
    cgroup_usage u;
    auto m = dir("memory");
    if (auto text = read_file(m + "/memory.stat")) {
      auto field = [&](const char* name) -> int64_t {
        std::string key = std::string{"\n"} + name + " ";
        auto pos = ("\n" + *text).find(key);
        return pos == std::string::npos ? -1 : std::atoll(text->c_str() + pos + key.size() - 1);
      };
      u.rss_bytes = field("total_rss");
      u.cache_bytes = field("total_cache");
      u.shmem_bytes = field("total_shmem");
      u.swap_bytes = field("total_swap");
      u.swapcached_bytes = field("total_swapcached");
    }
    if (auto t = read_file(m + "/memory.usage_in_bytes"))
      u.memory_bytes = std::atoll(t->c_str());
    if (unified_.empty()) {
      if (auto t = read_file(dir(cpu_time_controller) + "/cpuacct.usage"))
        u.cpu_ns = std::atoll(t->c_str());
    } else if (auto t = read_file(unified_ + "/cpu.stat"); t && t->rfind("usage_usec ", 0) == 0) {
      u.cpu_ns = std::atoll(t->c_str() + 11) * 1000;
    }
    return u;
  }

  expected<int64_t> squeeze_memory(int64_t floor_bytes) override {
    auto m = dir("memory");
    auto limit_knob = m + "/memory.limit_in_bytes", usage_knob = m + "/memory.usage_in_bytes";
    auto old_limit = read_file(limit_knob);
    if (!old_limit)
      return old_limit.err();
    int64_t before = read_counter(usage_knob, "");
    // Halving the distance to the floor each step lets the kernel reclaim
    // the coldest pages first; four steps reach within 1/16 of it, the last
    // goes to the floor itself. A write fails (EBUSY) when one reclaim pass
    // freed nothing, which also happens while pages move from the active to
    // the inactive list, or while the memcg's statistics are stale (see
    // reclaim_all_memory): retry while usage still falls, stop after four
    // tries in a row that freed nothing.
    int64_t target = before, last = before;
    for (int step = 0, stalls = 0, tries = 0; step < 5 && target > floor_bytes && tries < 256;
         ++tries) {
      int64_t next = step == 4 ? floor_bytes : floor_bytes + (target - floor_bytes) / 2;
      if (write_knob(limit_knob, std::to_string(std::max<int64_t>(next, 4096)))) {
        target = next, ++step, stalls = 0;
        continue;
      }
      int64_t now = read_counter(usage_knob, "");
      (void)read_file(m + "/memory.stat"); // fresh statistics for the next pass (see below)
      if (now < last)
        last = now, stalls = 0;
      else if (++stalls >= 4)
        break; // the kernel cannot get below this
    }
    int64_t after = read_counter(usage_knob, "");
    std::string restore = old_limit->substr(0, old_limit->find('\n'));
    if (auto st = write_knob(limit_knob, restore); !st)
      return error{st.err().code, "squeeze memory of " + m + ": restore the limit: "
                                    + st.err().message};
    return std::max<int64_t>(0, before - after);
  }

  expected<int64_t> reclaim_all_memory() override {
    auto m = dir("memory");
    int64_t before = read_counter(m + "/memory.usage_in_bytes", "");
    auto knob = m + "/memory.force_empty";
    unique_fd fd{::open(knob.c_str(), O_WRONLY | O_CLOEXEC)};
    if (!fd)
      return sys_error("open", knob, errno);
    // Reclaim picks what to scan from the memcg's statistics, which the
    // kernel refreshes lazily (rate-limited, ~2 s). Right after a page-out
    // they still count the page cache the group just dropped, so reclaim
    // scans page cache only, finds none and gives up with the tmpfs pages
    // untouched (measured: 64 of 200 MiB left; with the read first, 0).
    // Reading memory.stat refreshes them. Then repeat while a pass frees a
    // MiB or more. EBUSY: it could not reclaim everything (no swap for
    // anonymous pages, a task that allocates); what it reclaimed is gone.
    for (int64_t last = before, pass = 0; pass < 4; ++pass) {
      (void)read_file(m + "/memory.stat");
      if (::write(fd.get(), "0", 1) < 0 && errno != EBUSY)
        return sys_error("write 0 to", knob, errno);
      int64_t now = read_counter(m + "/memory.usage_in_bytes", "");
      if (last - now < (int64_t{1} << 20))
        break;
      last = now;
    }
    int64_t after = read_counter(m + "/memory.usage_in_bytes", "");
    return std::max<int64_t>(0, before - after);
  }

  status add_process(pid_t pid) override {
    auto p = std::to_string(pid);
    for (auto& d : all_dirs())
      if (auto st = write_knob(d + "/cgroup.procs", p); !st)
        return st;
    return {};
  }

  std::vector<pid_t> processes() const override {
    std::vector<pid_t> out;
    auto text = read_file(dir("pids") + "/cgroup.procs");
    if (!text)
      return out;
    const char* p = text->c_str();
    char* end = nullptr;
    for (long v; (v = std::strtol(p, &end, 10)) > 0 && end != p; p = end)
      out.push_back(static_cast<pid_t>(v));
    return out;
  }

  expected<int> oom_eventfd() const override {
    auto m = dir("memory");
    int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd < 0)
      return sys_error("eventfd for oom of", m, errno);
    int ofd = ::open((m + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC);
    if (ofd < 0) {
      auto err = errno;
      ::close(efd);
      return sys_error("open", m + "/memory.oom_control", err);
    }
    auto line = std::to_string(efd) + " " + std::to_string(ofd);
    auto st = write_text(m + "/cgroup.event_control", line);
    ::close(ofd); // the kernel holds its own reference once registered
    if (!st) {
      ::close(efd);
      return st.err();
    }
    return efd;
  }

  memory_events memory() const override {
    auto m = dir("memory");
    return {read_counter(m + "/memory.oom_control", "oom_kill"),
            read_counter(m + "/memory.failcnt", "")};
  }

  status freeze(bool frozen) override {
    auto f = dir("freezer") + "/freezer.state";
    if (auto st = write_knob(f, frozen ? "FROZEN" : "THAWED"); !st)
      return st;
    // The legacy freezer passes through FREEZING (~3 ms here) and may need
    // the write repeated for tasks that were busy in the kernel.
    for (int i = 0; frozen && i < 2000; ++i) {
      auto s = read_file(f);
      if (s && s->rfind("FROZEN", 0) == 0)
        return {};
      (void)write_knob(f, "FROZEN");
      timespec ts{0, 500000};
      ::nanosleep(&ts, nullptr);
    }
    return frozen ? status{sys_error("freeze", f, ETIMEDOUT, errc::timeout)} : status{};
  }

  bool frozen() const override {
    auto s = read_file(dir("freezer") + "/freezer.state");
    return s && (s->rfind("FROZEN", 0) == 0 || s->rfind("FREEZING", 0) == 0);
  }

  status remove() override {
    status first;
    for (auto& d : all_dirs()) {
      auto st = remove_dir(d);
      if (!st && first)
        first = st;
    }
    if (!unified_.empty()) // made by an older node
      ::rmdir(dir(cpu_time_controller).c_str());
    return first;
  }

  status move_cpu(const std::string& rel) override {
    if (rel == cpu_rel_)
      return {};
    if (!valid_rel(rel))
      return invalid_argument("move cpu group to " + rel + ": must be relative, without ..");
    auto from = dir("cpu"), to = root_ + "/cpu/" + rel;
    bool made = !exists(to);
    if (auto st = make_dirs(to); !st)
      return st;
    status st;
    for (auto knob : {"/cpu.cfs_period_us", "/cpu.cfs_quota_us"}) // period first: quota <= it
      if (auto v = read_file(from + knob); v && st)
        st = write_knob(to + knob, v->substr(0, v->find('\n')));
    if (st)
      st = move_tasks(from, to);
    if (!st) {
      (void)move_tasks(to, from);
      if (made)
        ::rmdir(to.c_str());
      return error{st.err().code, "move cpu group " + from + " to " + to + ": " +
                                    st.err().message};
    }
    cpu_rel_ = rel;
    dirs_[0] = to; // controllers[0] is cpu
    return remove_dir(from);
  }

  std::vector<std::string> paths() const override { return all_dirs(); }
  std::string unified_path() const override { return unified_; }

 private:
  std::string dir(const char* ctrl) const {
    return root_ + "/" + ctrl + "/" + (std::string_view{ctrl} == "cpu" ? cpu_rel_ : rel_);
  }

  // Every process, then any thread left behind on its own (v1 lets threads
  // of one process live in different groups), from `from` to `to`. Writing a
  // process id moves all its threads at once, and a fork either completes
  // before (the child is listed on the next read) or after (the child is
  // born in `to`). A task that exits meanwhile (ESRCH) is skipped.
  static status move_tasks(const std::string& from, const std::string& to) {
    for (int pass = 0; pass < 64; ++pass) {
      bool any = false;
      for (auto file : {"/cgroup.procs", "/tasks"}) {
        auto text = read_file(from + file);
        if (!text)
          return text.err();
        unique_fd out{::open((to + file).c_str(), O_WRONLY | O_CLOEXEC)};
        if (!out)
          return sys_error("open", to + file, errno);
        const char* p = text->c_str();
        char* end = nullptr;
        for (long v; (v = std::strtol(p, &end, 10)) > 0 && end != p; p = end) {
          any = true;
          auto id = std::to_string(v);
          if (::write(out.get(), id.data(), id.size()) < 0 && errno != ESRCH)
            return sys_error("write " + id + " to", to + file, errno);
        }
        if (any)
          break; // re-read: the threads went with their processes
      }
      if (!any)
        return {};
    }
    return sys_error("move tasks from", from, EAGAIN, errc::unavailable);
  }

  std::vector<std::string> all_dirs() const {
    auto v = dirs_;
    if (!unified_.empty())
      v.push_back(unified_);
    return v;
  }

  std::string root_, rel_, cpu_rel_;
  std::vector<std::string> dirs_;
  std::string unified_;
};

} // namespace

expected<std::unique_ptr<cgroup>> create_cgroup_v1(const std::string& root,
                                                   const std::string& rel,
                                                   const std::string& cpu_rel) {
  if (!valid_rel(rel) || (!cpu_rel.empty() && !valid_rel(cpu_rel)))
    return invalid_argument("cgroup path " + rel + " (cpu " + cpu_rel +
                            "): must be relative, without ..");
  auto cg = std::make_unique<cgroup_v1>(root, rel, cpu_rel);
  if (auto st = cg->make(); !st)
    return st.err();
  return std::unique_ptr<cgroup>(std::move(cg));
}

void prune_cgroup_v1(const std::string& root, const std::string& rel) {
  std::string r = rel;
  while (!r.empty()) {
    for (auto c : controllers)
      ::rmdir((root + "/" + c + "/" + r).c_str());
    ::rmdir((root + "/" + cpu_time_controller + "/" + r).c_str());
    ::rmdir((root + "/unified/" + r).c_str());
    auto slash = r.find_last_of('/');
    r.resize(slash == std::string::npos ? 0 : slash);
  }
}

std::unique_ptr<cgroup> open_cgroup_v1(const std::string& root, const std::string& rel,
                                       const std::string& cpu_rel) {
  return std::make_unique<cgroup_v1>(root, rel, cpu_rel);
}

} // namespace dsec::sys
