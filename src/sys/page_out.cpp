// process_madvise(MADV_PAGEOUT) over /proc/<pid>/maps.
#include "sys/page_out.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

#include "sys/fd.hpp"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

namespace dsec::sys {

int64_t page_out(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps)
    return 0;
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
  unique_fd pidfd{static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
  if (!pidfd)
    return 0;
  // process_madvise takes at most IOV_MAX ranges per call and stops at the
  // first range it cannot advise (returning what it did before it, or an
  // error if that is nothing): go on past that range.
  int64_t advised = 0;
  for (size_t i = 0; i < ranges.size();) {
    size_t n = std::min<size_t>(ranges.size() - i, 512);
    auto r = ::syscall(SYS_process_madvise, pidfd.get(), &ranges[i], n, MADV_PAGEOUT, 0);
    if (r < 0) {
      if (errno == ENOSYS || errno == ESRCH)
        break;
      ++i;
      continue;
    }
    advised += r;
    size_t done = 0; // ranges fully covered by r bytes
    for (size_t left = static_cast<size_t>(r); done < n && ranges[i + done].iov_len <= left; ++done)
      left -= ranges[i + done].iov_len;
    i += done == n ? n : done + 1;
  }
  return advised;
}

int64_t page_out(const std::vector<pid_t>& pids) {
  int64_t sum = 0;
  for (auto pid : pids)
    sum += page_out(pid);
  return sum;
}

} // namespace dsec::sys
