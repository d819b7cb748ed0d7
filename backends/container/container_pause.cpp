// Pause, resume and the changes of a container sandbox.
//
// Pause freezes every process of the sandbox (cgroup freezer: they stop
// where they are, their files and sockets stay) and then asks the kernel to
// page out what they map (process_madvise MADV_PAGEOUT over each process's
// mappings): clean file pages are dropped at once, anonymous memory goes to
// swap when the node has any (zram). Resume thaws. A paused sandbox costs
// no CPU and, with swap, little memory; its state is intact.
//
// The changes of a sandbox are its overlayfs upper directory: new and
// changed files, whiteouts (0:0 character devices) for deletions and the
// trusted.overlay.opaque xattr on directories that replaced a lower one:
// exactly the form overlayfs reads back when the directory, made into an
// EROFS image, becomes a lower layer of another sandbox.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "backends/container/container_sandbox.hpp"
#include "sys/fd.hpp"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

namespace dsec::backends {

namespace {

/// Pages out what `pid` maps. Best effort: a process that exits meanwhile,
/// or a kernel without process_madvise, only means less memory is freed.
void page_out(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps)
    return;
  std::vector<iovec> ranges;
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || hi <= lo)
      continue;
    if (line.find("[vsyscall]") != std::string::npos || line.find("[vvar") != std::string::npos)
      continue;
    ranges.push_back({reinterpret_cast<void*>(lo), hi - lo});
  }
  sys::unique_fd pidfd{static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
  if (!pidfd)
    return;
  // process_madvise takes at most IOV_MAX ranges per call and stops at the
  // first range it cannot advise: go on past it.
  for (size_t i = 0; i < ranges.size();) {
    size_t n = std::min<size_t>(ranges.size() - i, 512);
    auto r = ::syscall(SYS_process_madvise, pidfd.get(), &ranges[i], n, MADV_PAGEOUT, 0);
    if (r < 0 && errno == ENOSYS)
      return;
    i += r < 0 ? 1 : n;
  }
}

} // namespace

status container_sandbox::pause() {
  std::lock_guard<std::mutex> once(destroy_m_);
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroyed_ || dead_)
      return unavailable("pause " + parts_.id + ": sandbox is gone");
  }
  if (!parts_.cgroup)
    return internal_error("pause " + parts_.id + ": no cgroup to freeze");
  if (auto st = parts_.cgroup->freeze(true); !st)
    return error{st.err().code, "pause " + parts_.id + ": " + st.err().message};
  for (auto pid : parts_.cgroup->processes())
    page_out(pid);
  return {};
}

status container_sandbox::resume() {
  std::lock_guard<std::mutex> once(destroy_m_);
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroyed_ || dead_)
      return unavailable("resume " + parts_.id + ": sandbox is gone");
  }
  if (!parts_.cgroup)
    return internal_error("resume " + parts_.id + ": no cgroup to thaw");
  if (auto st = parts_.cgroup->freeze(false); !st)
    return error{st.err().code, "resume " + parts_.id + ": " + st.err().message};
  return {};
}

expected<std::string> container_sandbox::changes_dir() {
  std::lock_guard<std::mutex> g(m_);
  if (destroyed_ || dead_)
    return unavailable("snapshot " + parts_.id + ": sandbox is gone");
  return parts_.dir + "/upper";
}

} // namespace dsec::backends
