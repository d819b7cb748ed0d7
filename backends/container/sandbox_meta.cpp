// The meta file of a sandbox (<dir>/meta): what a restarted node needs to
// take a running sandbox back (init's pid and start time, the node, the
// spec's env, where the root is), and the checks it makes when it does.
#include "backends/container/sandbox_meta.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/magic.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/channel/protocol.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

expected<uint64_t> start_time_of(pid_t pid) {
  auto stat = sys::read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat)
    return stat.err();
  // Field 2 (comm) may hold spaces and parentheses: count from the last ')'.
  auto pos = stat->rfind(')');
  if (pos == std::string::npos)
    return internal_error("parse /proc/" + std::to_string(pid) + "/stat");
  const char* p = stat->c_str() + pos + 2;
  for (int field = 3; field < 22 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p)
      ++p;
  }
  if (!p)
    return internal_error("parse /proc/" + std::to_string(pid) + "/stat");
  return std::strtoull(p, nullptr, 10);
}

} // namespace

// The frame id of <dir>/meta says where the root is (sandbox_meta).
constexpr uint32_t meta_version_host_root = 1, meta_version_root_in_init = 2;

status remove_boot_files(const std::string& dir) {
  status first;
  for (const char* f : {"/ctl.sock", "/meta"})
    if (::unlink((dir + f).c_str()) != 0 && errno != ENOENT && first)
      first = sys_error("unlink", dir + f, errno);
  return first;
}

status write_meta(const std::string& dir, sandbox_meta m) {
  auto start = start_time_of(m.pid);
  if (!start)
    return start.err();
  std::vector<std::string> env;
  for (auto& [k, v] : m.env) {
    env.push_back(k);
    env.push_back(v);
  }
  auto body = init_proto::writer(init_proto::msg::config,
                                 m.root_held_by_init ? meta_version_root_in_init
                                                     : meta_version_host_root)
                .i32(m.pid).u64(*start).str(m.node_id).strs(env).finish();
  // No fsync: the meta file guards against a node restart, not a host crash
  // (a host crash takes the sandbox with it).
  auto path = dir + "/meta";
  sys::unique_fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!fd || ::write(fd.get(), body.data(), body.size()) != ssize_t(body.size()))
    return sys_error("write", path, errno);
  return {};
}

expected<sandbox_meta> read_meta(const std::string& dir) {
  auto text = sys::read_file(dir + "/meta");
  if (!text)
    return text.err();
  init_proto::header h;
  if (init_proto::peek_frame(*text, h) != init_proto::parse::complete)
    return internal_error("read " + dir + "/meta: malformed");
  init_proto::reader r(std::string_view(*text).substr(init_proto::header_size, h.length));
  sandbox_meta m;
  if (h.id != meta_version_host_root && h.id != meta_version_root_in_init)
    return internal_error("read " + dir + "/meta: unknown version " + std::to_string(h.id));
  m.root_held_by_init = h.id == meta_version_root_in_init;
  m.pid = r.i32();
  m.start_time = r.u64();
  m.node_id = r.str();
  auto env = r.strs();
  for (size_t i = 0; i + 1 < env.size(); i += 2)
    m.env[env[i]] = env[i + 1];
  if (!r.done() || m.pid <= 1 || env.size() % 2)
    return internal_error("read " + dir + "/meta: malformed");
  return m;
}

expected<sys::unique_fd> open_init(const sandbox_meta& m, const std::string& id) {
  sys::unique_fd pidfd{static_cast<int>(::syscall(SYS_pidfd_open, m.pid, 0))};
  if (!pidfd)
    return sys_error("pidfd_open init of", id, errno,
                     errno == ESRCH ? errc::not_found : errc::internal);
  // Checked after pidfd_open: the pidfd pins the process we compare.
  auto start = start_time_of(m.pid);
  if (!start || *start != m.start_time)
    return not_found("recover " + id + ": init " + std::to_string(m.pid) + " is gone");
  return pidfd;
}

expected<sys::unique_fd> reopen_root(const sandbox_meta& m, int pidfd, const std::string& dir,
                                     const std::string& id) {
  sys::unique_fd root;
  std::string shown;
  if (m.root_held_by_init) {
    // SAFETY: the pidfd pins the init open_init checked; the fd number is
    // ours (launch_init put the node view there and init never reuses it).
    shown = "root of " + id + " (fd " + std::to_string(init_proto::root_view_fd) + " of init)";
    root.reset(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, init_proto::root_view_fd, 0)));
    if (!root)
      return sys_error("pidfd_getfd", shown, errno,
                       errno == ESRCH ? errc::not_found : errc::internal);
  } else {
    shown = dir + "/rootfs";
    root.reset(::open(shown.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root)
      return sys_error("open", shown, errno);
  }
  struct statfs sf {};
  struct stat st {};
  if (::fstatfs(root.get(), &sf) != 0 || ::fstat(root.get(), &st) != 0)
    return sys_error("stat", shown, errno);
  if (sf.f_type != OVERLAYFS_SUPER_MAGIC || !S_ISDIR(st.st_mode))
    return internal_error("recover " + id + ": " + shown + " is not an overlay root");
  return root;
}

} // namespace dsec::backends
