// The layer store: building images with mkfs.erofs and
// committing them under the catalog lock. A build runs mkfs outside the lock
// (it can take minutes) and holds the lock only to check the ref, rename the
// image to its digest name and rewrite the catalog, so concurrent builders
// of different refs (threads, processes, nodes) do not wait for each other's
// mkfs and never lose each other's entries.
#include "layers/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <chrono>
#include <dirent.h>
#include <mutex>
#include <random>

#include "core/clock.hpp"
#include "core/layer_config.hpp"
#include "layers/blob_device.hpp"
#include "layers/catalog.hpp"
#include "layers/digest.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::layers {

namespace {

// Fixed image UUID (and image_epoch, see store.hpp): with them mkfs.erofs
// output depends only on the tree, so the same directory gives the same
// digest on any node.
constexpr const char* image_uuid = "d5ec0000-1a7e-4000-8000-000000000001";

// Orphans in tmp/ older than this are left by crashed builders and removed
// at open(). A day is far longer than any mkfs, so a live build on another
// node is never swept; too short would delete a slow peer's image mid-build.
constexpr int64_t stale_tmp_seconds = 24 * 3600;

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000);
}

bool is_dir(const std::string& path, bool follow = true) {
  struct stat st;
  int rc = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  return rc == 0 && S_ISDIR(st.st_mode);
}

bool is_dir_or_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && (S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode));
}

// The tail of a tool's output for an error message: enough to see the cause.
std::string tail(const std::string& out, size_t max = 600) {
  auto s = out.size() > max ? "..." + out.substr(out.size() - max) : out;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

void sweep_stale_tmp(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return;
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    struct stat st;
    auto path = dir + "/" + name;
    if (::lstat(path.c_str(), &st) != 0 || now - st.st_mtime <= stale_tmp_seconds)
      continue;
    if (S_ISREG(st.st_mode))
      ::unlink(path.c_str());
    else if (S_ISDIR(st.st_mode)) // import-*/prune-* staging of a killed import or build
      (void)sys::remove_tree(path);
  }
  ::closedir(d);
}

// True if `inner` is `outer` or below it (both resolved through symlinks).
bool is_within(const std::string& inner, const std::string& outer) {
  char a[PATH_MAX], b[PATH_MAX];
  if (!::realpath(inner.c_str(), a) || !::realpath(outer.c_str(), b))
    return false;
  std::string in{a}, out{b};
  return in == out || (in.size() > out.size() && in.compare(0, out.size(), out) == 0
                       && (out == "/" || in[out.size()] == '/'));
}

status check_source(const std::string& src_dir, const std::string& kind, const std::string& what,
                    const std::string& root) {
  struct stat st;
  if (::stat(src_dir.c_str(), &st) != 0)
    return sys_error("build layer " + what + ": source", src_dir, errno,
                     errno == ENOENT ? errc::not_found : errc::invalid_argument);
  if (!S_ISDIR(st.st_mode))
    return invalid_argument("build layer " + what + ": source " + src_dir + " is not a directory");
  // mkfs would read the image it is writing (and every blob) into the image.
  if (is_within(root, src_dir))
    return invalid_argument("build layer " + what + ": source " + src_dir
                            + " contains the layer store " + root);
  if (kind == "base" && !is_dir_or_symlink(src_dir + "/bin") && !is_dir(src_dir + "/usr/bin", false))
    return invalid_argument("build layer " + what + ": source " + src_dir
                            + " does not look like a root file system (a base layer needs"
                              " bin/ or usr/bin/ at its top; did you pass its parent, or mean --kind workspace?)");
  return {};
}

bool same_config(const layer_config& a, const layer_config& b) {
  return a.env == b.env && a.workdir == b.workdir && a.user == b.user
         && a.start == b.start;
}

} // namespace

// -- validation ---------------------------------------------------------------

status validate_kind(const std::string& kind) {
  if (kind == "base" || kind == "workspace" || kind == "toolkit" || kind == "snapshot")
    return {};
  return invalid_argument("layer kind \"" + kind
                          + "\": must be one of base, workspace, toolkit, snapshot");
}

// -- store --------------------------------------------------------------------

struct store::catalog_cache {
  std::mutex mtx;
  struct stat seen {};
  std::shared_ptr<const catalog_map> entries;
};

store::store(std::string root)
  : root_(std::move(root)), cache_(std::make_shared<catalog_cache>()) {}

expected<std::shared_ptr<const store::catalog_map>> store::load_catalog() const {
  auto path = root_ + "/catalog.json";
  struct stat st {};
  bool present = ::stat(path.c_str(), &st) == 0;
  std::lock_guard<std::mutex> guard{cache_->mtx};
  auto& c = *cache_;
  if (c.entries && present && st.st_ino == c.seen.st_ino && st.st_size == c.seen.st_size
      && st.st_mtim.tv_sec == c.seen.st_mtim.tv_sec
      && st.st_mtim.tv_nsec == c.seen.st_mtim.tv_nsec)
    return c.entries;
  auto cat = catalog::load(path);
  if (!cat)
    return cat.err();
  auto fresh = std::make_shared<const catalog_map>(std::move(*cat));
  if (present) { // a missing catalog is not cached: the first build creates it
    c.seen = st;
    c.entries = fresh;
  }
  return fresh;
}

expected<store> store::open(const std::string& root) {
  if (root.empty())
    return invalid_argument("open layer store: empty root path");
  auto trimmed = root;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  for (auto dir : {trimmed, trimmed + "/blobs", trimmed + "/tmp"})
    if (auto st = sys::make_dirs(dir); !st)
      return error{st.err().code, "open layer store: " + st.err().message};
  if (auto cat = catalog::load(trimmed + "/catalog.json"); !cat)
    return error{cat.err().code, "open layer store " + trimmed + ": " + cat.err().message};
  sweep_stale_tmp(trimmed + "/tmp");
  return store{trimmed};
}

std::string store::blob_path(const std::string& digest) const {
  auto hex = digest_hex(digest);
  return hex.empty() ? std::string{} : root_ + "/blobs/sha256-" + hex + ".erofs";
}

expected<layer_info> store::resolve(const std::string& ref) const {
  auto parsed = parse_ref(ref);
  if (!parsed)
    return parsed.err();
  auto cat = load_catalog();
  if (!cat)
    return cat.err();
  auto it = (*cat)->find(ref);
  if (it == (*cat)->end())
    return not_found("layer " + ref + " not found in store " + root_);
  return it->second;
}

expected<std::vector<layer_info>> store::try_list() const {
  auto cat = load_catalog();
  if (!cat)
    return cat.err();
  std::vector<layer_info> out;
  out.reserve((*cat)->size());
  for (auto& [ref, info] : **cat)
    out.push_back(info);
  return out;
}

std::vector<layer_info> store::list() const {
  auto all = try_list();
  return all ? std::move(*all) : std::vector<layer_info>{};
}

expected<std::string> store::make_image(const std::string& src_dir, const std::string& what) const {
  auto tmp = root_ + "/tmp/build-" + random_suffix() + ".erofs";
  auto res = sys::run_command({"mkfs.erofs", std::string{"-T"} + image_epoch,
                               std::string{"-U"} + image_uuid, "--quiet", tmp, src_dir});
  if (!res) {
    ::unlink(tmp.c_str());
    return error{res.err().code, "build layer " + what + ": run mkfs.erofs: " + res.err().message};
  }
  if (res->exit_code != 0) {
    ::unlink(tmp.c_str());
    return internal_error("build layer " + what + ": mkfs.erofs " + src_dir + " exited with "
                          + std::to_string(res->exit_code) + ": " + tail(res->output));
  }
  // mkfs.erofs does not fsync; the image must be on disk before its name
  // (the digest) is published by the rename in commit().
  sys::unique_fd fd{::open(tmp.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd || ::fsync(fd.get()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error("build layer " + what + ": fsync image", tmp, err);
  }
  return tmp;
}

expected<layer_info> store::build(const std::string& src_dir, const std::string& name,
                                  const std::string& version, const std::string& kind) {
  return build(src_dir, name, version, kind, build_options{});
}

expected<layer_info> store::build_plain(const std::string& src_dir, layer_info info) {
  auto what = info.ref;
  auto tmp = make_image(src_dir, what);
  if (!tmp)
    return tmp.err();
  auto digest = sha256_file(*tmp);
  struct stat st;
  if (!digest || ::stat(tmp->c_str(), &st) != 0) {
    ::unlink(tmp->c_str());
    return internal_error("build layer " + what + ": digest image " + *tmp + ": "
                          + (digest ? "stat failed" : digest.err().message));
  }
  info.digest = *digest;
  info.size_bytes = st.st_size;
  auto out = commit(*tmp, std::move(info));
  ::unlink(tmp->c_str()); // no-op after a successful rename
  return out;
}

expected<layer_info> store::add_blob(const std::string& tmp_image, const layer_info& info) {
  auto what = "add fetched layer " + info.ref;
  auto out = [&]() -> expected<layer_info> {
    auto ref = parse_ref(info.ref);
    if (!ref)
      return ref.err();
    if (ref->name != info.name || ref->version != info.version)
      return invalid_argument(what + ": name \"" + info.name + "\" and version \"" + info.version
                              + "\" do not match the ref");
    if (auto st = validate_kind(info.kind); !st)
      return st.err();
    if (!is_valid_digest(info.digest))
      return invalid_argument(what + ": bad digest \"" + info.digest + "\"");
    struct stat st;
    if (::stat(tmp_image.c_str(), &st) != 0)
      return sys_error(what + ": stat image", tmp_image, errno);
    if (st.st_size != info.size_bytes)
      return internal_error(what + ": image " + tmp_image + " has " + std::to_string(st.st_size)
                            + " bytes, the catalog entry says " + std::to_string(info.size_bytes)
                            + " (truncated or padded transfer)");
    auto digest = sha256_file(tmp_image);
    if (!digest)
      return error{digest.err().code, what + ": " + digest.err().message};
    if (*digest != info.digest)
      return internal_error(what + ": digest mismatch: the image is " + *digest
                            + ", the catalog entry says " + info.digest + " (corrupt copy)");
    return commit(tmp_image, info);
  }();
  ::unlink(tmp_image.c_str()); // no-op after a successful rename
  return out;
}

expected<layer_info> store::commit(const std::string& tmp_image, layer_info info) {
  auto what = "build layer " + info.ref;
  auto held = catalog::lock::acquire(root_ + "/catalog.lock");
  if (!held)
    return error{held.err().code, what + ": " + held.err().message};
  auto cat = catalog::load(root_ + "/catalog.json");
  if (!cat)
    return error{cat.err().code, what + ": " + cat.err().message};
  auto it = cat->find(info.ref);
  if (it != cat->end() && it->second.digest != info.digest)
    return conflict(what + ": the ref already names " + it->second.digest + ", the new image is "
                    + info.digest + " (layers are immutable: use a new version)");
  if (it != cat->end() && !same_config(it->second.config, info.config))
    return conflict(what + ": the ref already names this image with other exec defaults"
                           " (env, workdir or user; layers are immutable: use a new version)");
  auto blob = blob_path(info.digest);
  // Same digest = same bytes: an existing blob is kept (it may be mounted),
  // a missing one (lost, or never committed) is put in place.
  if (!sys::exists(blob)) {
    if (::rename(tmp_image.c_str(), blob.c_str()) != 0)
      return sys_error(what + ": rename image", tmp_image + " -> " + blob, errno);
    if (auto st = catalog::sync_dir(root_ + "/blobs"); !st)
      return error{st.err().code, what + ": " + st.err().message};
  }
  if (it != cat->end())
    return it->second;
  info.created_at_ms = now_ms();
  (*cat)[info.ref] = info;
  if (auto st = catalog::save(root_ + "/catalog.json", *cat); !st)
    return error{st.err().code, what + ": " + st.err().message};
  return info;
}

// -- chunked layers (metadata image + data blob) -------------------------------

expected<layer_info> store::build(const std::string& src_dir, const std::string& name,
                                  const std::string& version, const std::string& kind,
                                  const build_options& opts) {
  for (auto st : {validate_name(name), validate_version(version), validate_kind(kind)})
    if (!st)
      return st.err();
  auto what = name + "@" + version;
  if (auto st = validate_layer_config(opts.config); !st)
    return error{st.err().code, "build layer " + what + ": " + st.err().message};
  if (!opts.chunked) {
    if (auto st = check_source(src_dir, kind, what, root_); !st)
      return st.err();
    layer_info info;
    info.ref = what;
    info.name = name;
    info.version = version;
    info.kind = kind;
    info.config = opts.config;
    return build_plain(src_dir, std::move(info));
  }
  if (opts.chunk_size < 4096 || (opts.chunk_size & (opts.chunk_size - 1)) != 0)
    return invalid_argument("build layer " + what + ": chunk size "
                            + std::to_string(opts.chunk_size)
                            + " is not a power of two >= 4096");
  // The data blob's path goes into a mount option (device=PATH), where a
  // comma would end it.
  if (root_.find(',') != std::string::npos)
    return invalid_argument("build layer " + what + ": store root " + root_
                            + " contains ',', which a mount option cannot carry");
  if (auto st = check_source(src_dir, kind, what, root_); !st)
    return st.err();
  layer_info info;
  info.ref = what;
  info.name = name;
  info.version = version;
  info.kind = kind;
  info.config = opts.config;
  return build_chunked(src_dir, std::move(info), opts.chunk_size);
}

// mkfs writes metadata to tmp/X.erofs and data to tmp/X.blob; the blob is
// digested, renamed to its digest name and its digest written into the
// image's device slot; then the image is digested and committed like any
// other. A crash leaves at worst a data blob no image names.
expected<layer_info> store::build_chunked(const std::string& src_dir, layer_info info,
                                          uint32_t chunk_size) {
  auto what = info.ref;
  auto base = root_ + "/tmp/build-" + random_suffix();
  auto meta = base + ".erofs", data = base + data_blob_suffix;
  auto cleanup = [&] {
    ::unlink(meta.c_str());
    ::unlink(data.c_str());
  };
  auto res = sys::run_command({"mkfs.erofs", std::string{"-T"} + image_epoch,
                               std::string{"-U"} + image_uuid, "--quiet",
                               "--chunksize=" + std::to_string(chunk_size),
                               "--blobdev=" + data, meta, src_dir});
  if (!res || res->exit_code != 0) {
    cleanup();
    if (!res)
      return error{res.err().code, "build layer " + what + ": run mkfs.erofs: " + res.err().message};
    return internal_error("build layer " + what + ": mkfs.erofs --blobdev " + src_dir
                          + " exited with " + std::to_string(res->exit_code) + ": "
                          + tail(res->output));
  }
  struct stat data_st, meta_st;
  auto data_digest = sha256_file(data);
  if (!data_digest || ::stat(data.c_str(), &data_st) != 0) {
    cleanup();
    return internal_error("build layer " + what + ": digest data blob " + data + ": "
                          + (data_digest ? "stat failed" : data_digest.err().message));
  }
  if (auto st = write_data_blob_ref(meta, *data_digest, data_st.st_size); !st) {
    cleanup();
    return error{st.err().code, "build layer " + what + ": " + st.err().message};
  }
  for (auto* f : {&data, &meta}) { // mkfs.erofs does not fsync
    sys::unique_fd fd{::open(f->c_str(), O_RDONLY | O_CLOEXEC)};
    if (!fd || ::fsync(fd.get()) != 0) {
      auto err = errno;
      cleanup();
      return sys_error("build layer " + what + ": fsync", *f, err);
    }
  }
  auto data_final = root_ + "/blobs/sha256-" + digest_hex(*data_digest) + data_blob_suffix;
  if (!sys::exists(data_final)) {
    if (::rename(data.c_str(), data_final.c_str()) != 0) {
      auto err = errno;
      cleanup();
      return sys_error("build layer " + what + ": rename data blob", data + " -> " + data_final, err);
    }
    if (auto st = catalog::sync_dir(root_ + "/blobs"); !st) {
      cleanup();
      return error{st.err().code, "build layer " + what + ": " + st.err().message};
    }
  }
  auto digest = sha256_file(meta);
  if (!digest || ::stat(meta.c_str(), &meta_st) != 0) {
    cleanup();
    return internal_error("build layer " + what + ": digest image " + meta + ": "
                          + (digest ? "stat failed" : digest.err().message));
  }
  info.digest = *digest;
  // size_bytes stays the image's size, as for every layer (peers verify a
  // fetched image against it); the data blob's size is in the image.
  info.size_bytes = meta_st.st_size;
  auto out = commit(meta, std::move(info));
  cleanup(); // no-op for files already renamed into place
  return out;
}

} // namespace dsec::layers
