// mount_cache: the refcount table and the mount(2)/umount2(2) calls. The
// table's states make concurrent callers safe without holding the mutex
// across a syscall: an entry is `mounting` while one thread mounts (others
// wait on the condition variable), `mounted` while usable, `unmounting` while
// one thread unmounts (acquirers wait, then mount afresh).
#include "layers/mount_cache.hpp"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

// nodev/nosuid: a layer image is data from a build, never a source of device
// nodes or privilege; the sandbox's overlay adds its own flags on top.
constexpr unsigned long layer_mount_flags = MS_RDONLY | MS_NODEV | MS_NOSUID;

bool is_hex64(const std::string& s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

// Mount points of erofs file systems.
std::vector<std::string> erofs_mount_points() {
  std::vector<std::string> out;
  for (auto& m : sys::mounts())
    if (m.fstype == "erofs")
      out.push_back(m.point);
  return out;
}

// The mount options for `image`: empty for a self-contained image,
// "device=<data blob>" for a chunked one (layers/blob_device.hpp). The data
// blob must exist next to the image; its size must cover the blocks the image
// records, else reads would fail later with EIO inside a sandbox.
expected<std::string> mount_options(const std::string& image, const std::string& what) {
  auto ref = read_data_blob_ref(image);
  if (!ref)
    return error{ref.err().code, "mount layer " + what + ": " + ref.err().message};
  if (ref->digest.empty())
    return std::string{};
  auto data = data_blob_path(image, ref->digest);
  if (data.find(',') != std::string::npos)
    return invalid_argument("mount layer " + what + ": data blob path " + data
                            + " contains ',', which a mount option cannot carry");
  struct stat st;
  if (::stat(data.c_str(), &st) != 0)
    return sys_error("mount layer " + what + ": data blob", data, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  if (static_cast<uint64_t>(st.st_size) < ref->blocks * ref->block_size)
    return internal_error("mount layer " + what + ": data blob " + data + " is "
                          + std::to_string(st.st_size) + " bytes, the image records "
                          + std::to_string(ref->blocks) + " blocks (truncated?)");
  // A data blob that is a symlink is a lazy one (registry/lazy_source.hpp),
  // a file on the lazy blob daemon's FUSE mount. directio: EROFS then reads
  // it with direct reads sized to what the EROFS file being read needs (its
  // readahead stops at that file's end), instead of through the FUSE file's
  // page cache, whose readahead reads past a file into the next one in the
  // blob (bytes fetched from the registry that nobody reads), and which would
  // hold the blob's pages a second time beside EROFS's own.
  struct stat lst;
  if (::lstat(data.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    return "device=" + data + ",directio";
  return "device=" + data;
}

status mount_image(const std::string& blob, const std::string& dir, const std::string& what) {
  struct stat st;
  if (::stat(blob.c_str(), &st) != 0)
    return sys_error("mount layer " + what + ": image", blob, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  auto opts = mount_options(blob, what);
  if (!opts)
    return opts.err();
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return sys_error("mount layer " + what + ": mkdir", dir, errno);
  // SAFETY: read-only, nodev, nosuid mount of a file we built into a
  // directory only this cache uses; undone by unmount_dir(). A chunked
  // layer's data blob is opened by the kernel from the device= option.
  if (::mount(blob.c_str(), dir.c_str(), "erofs", layer_mount_flags,
              opts->empty() ? nullptr : opts->c_str()) != 0) {
    auto err = errno;
    ::rmdir(dir.c_str());
    return sys_error("mount layer " + what + ": mount erofs " + blob
                     + (opts->empty() ? "" : " (" + *opts + ")") + " on", dir, err);
  }
  return {};
}

// Unmounts every mount stacked on `dir` (normally one) and removes it.
status unmount_dir(const std::string& dir) {
  int count = 0;
  while (::umount2(dir.c_str(), UMOUNT_NOFOLLOW) == 0)
    ++count;
  if (errno != EINVAL && errno != ENOENT)
    return sys_error("unmount layer", dir, errno, errno == EBUSY ? errc::unavailable : errc::internal);
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
    return sys_error("unmount layer: rmdir", dir, errno);
  return {};
}

} // namespace

mount_cache::mount_cache(std::string mount_root) : root_(std::move(mount_root)) {
  while (root_.size() > 1 && root_.back() == '/')
    root_.pop_back();
}

std::string mount_cache::mount_dir(const std::string& digest) const {
  auto hex = digest_hex(digest);
  return hex.empty() ? std::string{} : root_ + "/" + hex;
}

expected<std::string> mount_cache::acquire(const layer_info& layer, const std::string& blob_path) {
  auto hex = digest_hex(layer.digest);
  auto what = layer.ref.empty() ? layer.digest : layer.ref;
  if (hex.empty())
    return invalid_argument("mount layer " + what + ": digest \"" + layer.digest
                            + "\" is not sha256:<64 hex>");
  auto dir = root_ + "/" + hex;
  std::unique_lock<std::mutex> guard{mu_};
  for (auto it = entries_.find(hex); it != entries_.end(); it = entries_.find(hex)) {
    if (it->second.st == state::mounted) {
      ++it->second.refs;
      return dir;
    }
    changed_.wait(guard);
  }
  entries_[hex] = entry{state::mounting, 0};
  guard.unlock();
  auto st = sys::make_dirs(root_);
  if (st)
    st = mount_image(blob_path, dir, what);
  guard.lock();
  if (!st) {
    entries_.erase(hex);
    changed_.notify_all();
    return st.err();
  }
  entries_[hex] = entry{state::mounted, 1};
  changed_.notify_all();
  return dir;
}

status mount_cache::release(const std::string& digest) {
  auto hex = digest_hex(digest);
  std::unique_lock<std::mutex> guard{mu_};
  auto it = entries_.find(hex);
  if (it == entries_.end() || it->second.st != state::mounted || it->second.refs == 0)
    return {};
  if (--it->second.refs > 0)
    return {};
  return unmount_locked_entry(guard, hex);
}

status mount_cache::unmount_locked_entry(std::unique_lock<std::mutex>& guard,
                                         const std::string& hex) {
  entries_[hex].st = state::unmounting;
  guard.unlock();
  auto st = unmount_dir(root_ + "/" + hex);
  guard.lock();
  if (st)
    entries_.erase(hex);
  else
    entries_[hex] = entry{state::mounted, 0};
  changed_.notify_all();
  return st;
}

expected<size_t> mount_cache::adopt_existing() {
  char real[PATH_MAX];
  if (!::realpath(root_.c_str(), real))
    return errno == ENOENT ? expected<size_t>{size_t{0}}
                           : expected<size_t>{sys_error("adopt layer mounts: realpath", root_, errno)};
  std::string prefix = std::string{real} + "/";
  size_t adopted = 0;
  std::lock_guard<std::mutex> guard{mu_};
  for (auto& mnt : erofs_mount_points()) {
    if (mnt.compare(0, prefix.size(), prefix) != 0)
      continue;
    auto hex = mnt.substr(prefix.size());
    if (is_hex64(hex) && entries_.emplace(hex, entry{state::mounted, 0}).second)
      ++adopted;
  }
  // Directories left by a crash between mkdir and mount (or after umount and
  // before rmdir) hold nothing: remove them. rmdir fails on anything else.
  if (DIR* d = ::opendir(root_.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (is_hex64(name) && entries_.find(name) == entries_.end())
        ::rmdir((root_ + "/" + name).c_str());
    }
    ::closedir(d);
  }
  return adopted;
}

status mount_cache::release_unused() {
  std::unique_lock<std::mutex> guard{mu_};
  status first;
  std::vector<std::string> unused;
  for (auto& [hex, e] : entries_)
    if (e.st == state::mounted && e.refs == 0)
      unused.push_back(hex);
  for (auto& hex : unused) {
    auto it = entries_.find(hex);
    if (it == entries_.end() || it->second.st != state::mounted || it->second.refs != 0)
      continue;
    if (auto st = unmount_locked_entry(guard, hex); !st && first)
      first = st;
  }
  return first;
}

status mount_cache::unmount_all() {
  std::unique_lock<std::mutex> guard{mu_};
  auto busy = [this] {
    for (auto& [hex, e] : entries_)
      if (e.st != state::mounted)
        return true;
    return false;
  };
  changed_.wait(guard, [&] { return !busy(); });
  status first;
  std::vector<std::string> all;
  for (auto& [hex, e] : entries_)
    all.push_back(hex);
  for (auto& hex : all) {
    auto it = entries_.find(hex);
    if (it == entries_.end() || it->second.st != state::mounted)
      continue;
    if (auto st = unmount_locked_entry(guard, hex); !st && first)
      first = st;
  }
  return first;
}

size_t mount_cache::mounted() const {
  std::lock_guard<std::mutex> guard{mu_};
  size_t n = 0;
  for (auto& [hex, e] : entries_)
    if (e.st == state::mounted)
      ++n;
  return n;
}

size_t mount_cache::refcount(const std::string& digest) const {
  std::lock_guard<std::mutex> guard{mu_};
  auto it = entries_.find(digest_hex(digest));
  return it == entries_.end() ? 0 : it->second.refs;
}

} // namespace dsec::layers
