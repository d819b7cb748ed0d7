// flock-held host files and process identities for the host-wide records.
#include "sys/host_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "sys/fs.hpp"

namespace dsec::sys {

expected<unique_fd> lock_host_file(const std::string& dir, const std::string& name) {
  if (auto st = make_dirs(dir, 0755); !st)
    return st.err();
  auto path = dir + "/" + name;
  unique_fd fd{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (!fd)
    return sys_error("open", path, errno);
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR)
      return sys_error("flock", path, errno);
  return fd;
}

int64_t process_start_time(int64_t pid) {
  auto t = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!t)
    return -1;
  auto close = t->rfind(')'); // the command may hold spaces and parens
  if (close == std::string::npos)
    return -1;
  std::istringstream in{t->substr(close + 2)};
  std::string field;
  for (int i = 3; i <= 22 && (in >> field); ++i)
    if (i == 22)
      return std::atoll(field.c_str());
  return -1;
}

} // namespace dsec::sys
