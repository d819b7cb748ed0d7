// newc cpio writer for the guest initramfs (see initramfs.hpp). The format:
// per entry a 110-byte ASCII header of hex fields, the NUL-terminated name
// padded to 4 bytes, the data padded to 4 bytes; "TRAILER!!!" ends it.
#include "backends/vm/initramfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

class cpio_writer {
 public:
  void dir(const std::string& name) { entry(name, S_IFDIR | 0755, 0, 0, {}); }
  void file(const std::string& name, uint32_t mode, const std::string& data) {
    entry(name, S_IFREG | mode, 0, 0, data);
  }
  void chardev(const std::string& name, unsigned maj, unsigned min) {
    entry(name, S_IFCHR | 0600, maj, min, {});
  }
  std::string finish() {
    entry("TRAILER!!!", 0, 0, 0, {});
    return std::move(out_);
  }

 private:
  void entry(const std::string& name, uint32_t mode, unsigned rmaj, unsigned rmin,
             const std::string& data) {
    char hdr[111];
    std::snprintf(hdr, sizeof hdr,
                  "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ino_++, mode,
                  0u, 0u, 1u, 0u, static_cast<unsigned>(data.size()), 0u, 0u, rmaj, rmin,
                  static_cast<unsigned>(name.size() + 1), 0u);
    out_.append(hdr, 110);
    out_ += name;
    out_.push_back('\0');
    pad();
    out_ += data;
    pad();
  }
  void pad() {
    while (out_.size() % 4)
      out_.push_back('\0');
  }
  std::string out_;
  unsigned ino_ = 1;
};

} // namespace

status write_guest_initramfs(const std::string& out, const std::string& init_path,
                             const std::string& modules_dir) {
  auto init = sys::read_file(init_path);
  if (!init)
    return error{init.err().code, "guest initramfs: read init " + init_path + ": " +
                                      init.err().message};
  std::vector<std::string> kos;
  DIR* d = ::opendir(modules_dir.c_str());
  if (!d)
    return sys_error("guest initramfs: open module dir", modules_dir, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".ko") == 0)
      kos.push_back(n);
  }
  ::closedir(d);
  std::sort(kos.begin(), kos.end());
  cpio_writer w;
  for (auto dir : {"dev", "proc", "sys", "modules", "sysroot"})
    w.dir(dir);
  w.chardev("dev/console", 5, 1);
  w.file("init", 0755, *init);
  for (auto& k : kos) {
    auto data = sys::read_file(modules_dir + "/" + k);
    if (!data)
      return error{data.err().code, "guest initramfs: read module " + k + ": " +
                                        data.err().message};
    w.file("modules/" + k, 0644, *data);
  }
  auto tmp = out + ".tmp." + std::to_string(::getpid());
  auto data = w.finish();
  sys::unique_fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (!fd)
    return sys_error("guest initramfs: create", tmp, errno);
  for (size_t off = 0; off < data.size();) {
    auto n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = errno;
      ::unlink(tmp.c_str());
      return sys_error("guest initramfs: write", tmp, e);
    }
    off += static_cast<size_t>(n);
  }
  fd.reset();
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return sys_error("guest initramfs: rename to", out, e);
  }
  return {};
}

} // namespace dsec::backends
