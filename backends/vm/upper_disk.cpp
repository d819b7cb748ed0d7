// Upper disk images of VM guests (see upper_disk.hpp).
#include "backends/vm/upper_disk.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <vector>

#include "sys/fd.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::backends {

expected<std::string> pristine_upper(const std::string& dir, int64_t disk_mb) {
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  auto path = dir + "/upper-" + std::to_string(disk_mb) + "M.ext4";
  if (sys::exists(path))
    return path;
  if (auto st = sys::make_dirs(dir, 0700); !st)
    return st.err();
  auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  // No journal (scratch space, gone with its sandbox), no metadata
  // checksums (CPU under TCG), no reserved blocks (disk_mb is what the
  // sandbox gets); inode tables are not zeroed (lazy_itable_init here,
  // noinit_itable at mount: a fresh sparse file reads as zeros anyway).
  // assume_storage_prezeroed (e2fsprogs >= 1.47) also marks them zeroed:
  // ~0.4 MiB of data per image instead of ~8 MiB for 512 MiB.
  auto mkfs = [&](const std::string& ext) {
    ::unlink(tmp.c_str());
    return sys::run_checked({"mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", "-O",
                             "^has_journal,^metadata_csum", "-E",
                             "lazy_itable_init=1,lazy_journal_init=1,nodiscard" + ext, "-L",
                             "dsec-upper", tmp, std::to_string(disk_mb) + "M"});
  };
  auto st = mkfs(",assume_storage_prezeroed=1");
  if (!st)
    st = mkfs("");
  if (!st) {
    ::unlink(tmp.c_str());
    return error{st.err().code, "format the guest upper disk: " + st.err().message};
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return sys_error("rename", tmp, e);
  }
  return path;
}

status copy_image(const std::string& from, const std::string& to) {
  sys::unique_fd in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!in)
    return sys_error("open", from, errno);
  struct stat st;
  if (::fstat(in.get(), &st) != 0)
    return sys_error("stat", from, errno);
  ::unlink(to.c_str());
  sys::unique_fd out{::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!out)
    return sys_error("create", to, errno);
  auto fail = [&](const char* what, int e) -> status {
    out.reset();
    ::unlink(to.c_str());
    return sys_error(std::string(what) + " (copying " + from + ")", to, e);
  };
  if (::ioctl(out.get(), FICLONE, in.get()) == 0)
    return {};
  if (::ftruncate(out.get(), st.st_size) != 0)
    return fail("truncate", errno);
  std::vector<char> buf(1 << 20);
  for (off_t off = 0; off < st.st_size;) {
    off_t data = ::lseek(in.get(), off, SEEK_DATA);
    if (data < 0 && errno == ENXIO)
      break; // only a hole is left
    if (data < 0)
      return fail("seek data", errno);
    off_t hole = ::lseek(in.get(), data, SEEK_HOLE);
    if (hole < 0)
      return fail("seek hole", errno);
    for (off = data; off < hole;) {
      auto n = ::pread(in.get(), buf.data(), std::min<off_t>(off_t(buf.size()), hole - off), off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return fail("read", n < 0 ? errno : EIO);
      for (ssize_t done = 0; done < n;) {
        auto w = ::pwrite(out.get(), buf.data() + done, size_t(n - done), off + done);
        if (w < 0 && errno == EINTR)
          continue;
        if (w <= 0)
          return fail("write", w < 0 ? errno : EIO);
        done += w;
      }
      off += n;
    }
  }
  return {};
}

} // namespace dsec::backends
