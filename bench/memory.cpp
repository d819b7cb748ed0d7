// /proc and memory-cgroup readers for the idle-sandbox memory measurement.
#include "bench/memory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "sys/fd.hpp"

namespace dsec::bench {

namespace {

// Value in kB of the line "Key:   123 kB" in `text`, 0 if absent.
double field_kb(const std::string& text, const std::string& key) {
  auto pos = text.find("\n" + key + ":");
  if (pos == std::string::npos)
    pos = text.rfind(key + ":", 0) == 0 ? 0 : std::string::npos;
  else
    pos += 1;
  if (pos == std::string::npos)
    return 0;
  return std::strtod(text.c_str() + pos + key.size() + 1, nullptr);
}

template <class F>
void for_each_entry(const std::string& dir, F&& f) {
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.')
      f(std::string(e->d_name), e->d_type);
  ::closedir(d);
}

} // namespace

std::string read_small_file(const std::string& path) {
  sys::unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  std::string out;
  if (!fd)
    return out;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0 && out.size() < (4u << 20))
    out.append(buf, static_cast<size_t>(n));
  return out;
}

proc_mem read_proc_mem(pid_t pid) {
  auto text = read_small_file("/proc/" + std::to_string(pid) + "/smaps_rollup");
  return {field_kb(text, "Rss"), field_kb(text, "Pss")};
}

proc_mem sum_proc_mem(const std::vector<pid_t>& pids) {
  proc_mem sum;
  for (auto pid : pids) {
    auto m = read_proc_mem(pid);
    sum.rss_kb += m.rss_kb;
    sum.pss_kb += m.pss_kb;
  }
  return sum;
}

std::vector<pid_t> cgroup_tree_procs(const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = read_small_file(dir + "/cgroup.procs");
  for (size_t pos = 0; pos < text.size();) {
    auto nl = text.find('\n', pos);
    auto line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty())
      pids.push_back(static_cast<pid_t>(std::atoi(line.c_str())));
    pos = nl == std::string::npos ? text.size() : nl + 1;
  }
  for_each_entry(dir, [&](const std::string& name, unsigned char type) {
    if (type == DT_DIR) {
      auto sub = cgroup_tree_procs(dir + "/" + name);
      pids.insert(pids.end(), sub.begin(), sub.end());
    }
  });
  return pids;
}

double cgroup_usage_kb(const std::string& dir) {
  auto text = read_small_file(dir + "/memory.usage_in_bytes");
  if (text.empty())
    return -1;
  return std::strtod(text.c_str(), nullptr) / 1024.0;
}

std::vector<pid_t> with_descendants(const std::vector<pid_t>& roots) {
  std::multimap<pid_t, pid_t> children; // ppid -> pid
  for_each_entry("/proc", [&](const std::string& name, unsigned char) {
    if (name[0] < '0' || name[0] > '9')
      return;
    auto stat = read_small_file("/proc/" + name + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos || close + 4 >= stat.size())
      return;
    // Fields after the command: " S ppid ..."
    auto ppid = static_cast<pid_t>(std::atoi(stat.c_str() + close + 4));
    children.emplace(ppid, static_cast<pid_t>(std::atoi(name.c_str())));
  });
  std::vector<pid_t> out(roots);
  for (size_t i = 0; i < out.size(); ++i) {
    auto range = children.equal_range(out[i]);
    for (auto it = range.first; it != range.second; ++it)
      out.push_back(it->second);
  }
  return out;
}

pid_t find_dsec_node() {
  pid_t found = -1;
  for_each_entry("/proc", [&](const std::string& name, unsigned char) {
    if (found > 0 || name[0] < '0' || name[0] > '9')
      return;
    if (read_small_file("/proc/" + name + "/comm") != "dsec\n")
      return;
    auto cmdline = read_small_file("/proc/" + name + "/cmdline");
    auto first_nul = cmdline.find('\0');
    if (first_nul != std::string::npos && cmdline.compare(first_nul + 1, 5, std::string("node\0", 5)) == 0)
      found = static_cast<pid_t>(std::atoi(name.c_str()));
  });
  return found;
}

} // namespace dsec::bench
