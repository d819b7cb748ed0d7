// The lazy blob file system (see blob_fs.hpp): libfuse3's high-level API,
// a flat read-only directory of blobs, reads through the chunk cache.
#define FUSE_USE_VERSION 312
#include "lazyfs/blob_fs.hpp"

#include <dirent.h>
#include <fuse3/fuse.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "registry/blob_extents.hpp"
#include "registry/chunk_list.hpp"

namespace dsec::lazyfs {

namespace {

constexpr const char* blob_prefix = "sha256-";
constexpr const char* blob_suffix = ".blob";

blob_fs* self() {
  return static_cast<blob_fs*>(fuse_get_context()->private_data);
}

// A source's file: read-only for everyone, its declared size, a fixed time
// (the content never changes).
void fill_stat(struct stat* st, uint64_t size) {
  std::memset(st, 0, sizeof *st);
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = off_t(size);
  st->st_blksize = 4096;
  st->st_blocks = off_t((size + 511) / 512);
}

void* on_init(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  // Readahead and EROFS's reads of a blob reach us as background requests,
  // of which the kernel keeps only 12 in flight by default: one per sandbox
  // of a burst waiting on the registry. Allow as many as the threads serve.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  // The kernel's own readahead on a blob reads past the end of the file
  // EROFS asked for into bytes nobody reads; 64 KiB instead of 128 KiB
  // fetched 1.51 bytes per byte read instead of 1.62 in as many requests
  // (chunk_size_bench.py --chunk-kb 16); none at all fetched 1.38 but made
  // 1.8x the requests, which cost more than the bytes.
  conn->max_readahead = 64u << 10;
  // Blobs are content-addressed: a name's size and bytes never change, so
  // the kernel may keep pages and attributes; an absent name must be asked
  // again (it may be registered any time).
  cfg->kernel_cache = 1;
  cfg->entry_timeout = 3600;
  cfg->attr_timeout = 3600;
  cfg->negative_timeout = 0;
  return fuse_get_context()->private_data;
}

int on_getattr(const char* path, struct stat* st, struct fuse_file_info*) {
  if (std::strcmp(path, "/") == 0) {
    std::memset(st, 0, sizeof *st);
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
    return 0;
  }
  auto hex = blob_name_hex(path + 1);
  if (hex.empty())
    return -ENOENT;
  auto src = self()->source(hex);
  if (!src)
    return src.err().code == errc::not_found ? -ENOENT : -EIO;
  fill_stat(st, (*src)->size);
  return 0;
}

int on_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, struct fuse_file_info*,
               enum fuse_readdir_flags) {
  if (std::strcmp(path, "/") != 0)
    return -ENOTDIR;
  fill(buf, ".", nullptr, 0, fuse_fill_dir_flags(0));
  fill(buf, "..", nullptr, 0, fuse_fill_dir_flags(0));
  auto dir = registry::lazy_sources_dir(self()->store_root());
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() != 7 + 64 + 5 || name.compare(name.size() - 5, 5, ".json") != 0)
        continue;
      auto blob = name.substr(0, name.size() - 5) + blob_suffix;
      if (auto src = self()->source(blob_name_hex(blob)); src) {
        struct stat st;
        fill_stat(&st, (*src)->size);
        fill(buf, blob.c_str(), &st, 0, fuse_fill_dir_flags(0));
      }
    }
    ::closedir(d);
  }
  return 0;
}

int on_open(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY)
    return -EROFS;
  auto hex = blob_name_hex(path + 1);
  if (hex.empty() || !self()->source(hex))
    return -ENOENT;
  fi->keep_cache = 1;
  self()->note_open();
  return 0;
}

int on_release(const char*, struct fuse_file_info*) {
  self()->note_release();
  return 0;
}

int on_read(const char* path, char* buf, size_t size, off_t offset, struct fuse_file_info*) {
  auto hex = blob_name_hex(path + 1);
  if (hex.empty() || offset < 0)
    return -ENOENT;
  auto n = self()->read(hex, uint64_t(offset), size, buf);
  if (!n) {
    std::cerr << "dsec lazyfs: read " << path << " [" << offset << ", +" << size
              << "): " << n.err().message << " (EIO)" << std::endl;
    return -EIO;
  }
  return int(*n);
}

struct fuse_operations make_operations() {
  struct fuse_operations ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = on_init;
  ops.getattr = on_getattr;
  ops.readdir = on_readdir;
  ops.open = on_open;
  ops.release = on_release;
  ops.read = on_read;
  return ops;
}

} // namespace

std::string blob_name_hex(const std::string& name) {
  if (name.size() != 7 + 64 + 5 || name.compare(0, 7, blob_prefix) != 0
      || name.compare(name.size() - 5, 5, blob_suffix) != 0)
    return {};
  auto hex = name.substr(7, 64);
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return {};
  return hex;
}

expected<std::vector<std::string>> range_fetcher::fetch_ranges(
  const registry::blob_source& src, const std::vector<registry::byte_range>& ranges) {
  std::vector<std::string> out;
  for (const auto& r : ranges) {
    auto got = fetch(src, r.offset, r.len);
    if (!got)
      return got.err();
    out.push_back(std::move(*got));
  }
  return out;
}

blob_fs::blob_fs(std::string store_root, std::shared_ptr<chunk_cache> cache,
                 std::shared_ptr<range_fetcher> fetcher, fetch_policy policy)
  : store_root_(std::move(store_root)),
    cache_(std::move(cache)),
    fetcher_(std::move(fetcher)),
    policy_(policy) {
}

expected<std::shared_ptr<const blob_fs::source_state>> blob_fs::lookup(const std::string& hex) {
  {
    std::lock_guard<std::mutex> guard{mu_};
    if (auto it = sources_.find(hex); it != sources_.end())
      return it->second;
  }
  auto digest = "sha256:" + hex;
  auto src = registry::read_blob_source(store_root_, digest);
  if (!src)
    return src.err();
  auto state = std::make_shared<source_state>();
  state->src = std::make_shared<const registry::blob_source>(std::move(*src));
  if (auto list = registry::load_chunk_list(store_root_, digest); list) {
    auto chunk = uint64_t(state->src->chunk_size);
    if (list->size() / 32 != (state->src->size + chunk - 1) / chunk)
      return error{errc::invalid_argument,
                   "lazy blob " + digest + ": its chunk list has " + std::to_string(list->size() / 32)
                     + " digests, the blob " + std::to_string((state->src->size + chunk - 1) / chunk)
                     + " chunks"};
    state->chunks = std::move(*list);
  } else if (list.err().code != errc::not_found) {
    return list.err();
  }
  // Without saved extents (an older registration) reads are not widened.
  if (auto ext = registry::load_blob_extents(store_root_, digest); ext)
    state->extents = std::move(*ext);
  else if (ext.err().code != errc::not_found)
    return ext.err();
  std::lock_guard<std::mutex> guard{mu_};
  return sources_.emplace(hex, std::move(state)).first->second;
}

expected<std::shared_ptr<const registry::blob_source>> blob_fs::source(const std::string& hex) {
  auto s = lookup(hex);
  if (!s)
    return s.err();
  return (*s)->src;
}

expected<size_t> blob_fs::read(const std::string& hex, uint64_t offset, size_t len, char* out) {
  auto s = lookup(hex);
  if (!s)
    return s.err();
  auto state = *s;
  const auto& src = *state->src;
  if (offset >= src.size)
    return size_t{0};
  len = size_t(std::min<uint64_t>(len, src.size - offset));
  const uint64_t chunk = src.chunk_size;
  const uint64_t chunks = (src.size + chunk - 1) / chunk;
  auto fetcher = fetcher_;
  auto make = [&](uint64_t index) {
    chunk_request req;
    req.blob = hex;
    req.index = index;
    uint64_t start = index * chunk;
    req.length = uint32_t(std::min<uint64_t>(chunk, src.size - start));
    req.chunk_size = uint32_t(chunk);
    req.sha256 = registry::chunk_digest_hex(state->chunks, index);
    req.fetch = [fetcher, state, start, length = req.length]() {
      return fetcher->fetch(*state->src, start, length);
    };
    return req;
  };
  const uint64_t first = offset / chunk, last = (offset + len - 1) / chunk;
  bool misses = false;
  for (uint64_t index = first; index <= last && !misses; ++index)
    misses = !cache_->holds(hex, index);
  // A read that misses inside a known file fetches the whole file; else one
  // that continues a stream also fetches what follows it (fetch_plan.hpp).
  // One that finds its chunks held fetches nothing.
  auto ahead = streams_.note_read(hex, offset, len, policy_);
  // Counted while it waits, for the readers that miss after it.
  struct waiting_guard {
    std::atomic<int>* n = nullptr;
    ~waiting_guard() {
      if (n)
        n->fetch_sub(1);
    }
  } waiting;
  if (misses) {
    const int others = waiting_.fetch_add(1);
    waiting.n = &waiting_;
    auto span = whole_file_span(state->extents, offset, len, chunk, src.size,
                                policy_.max_file_fetch);
    span.first = std::min(span.first, first);
    span.last = std::max(span.last, last);
    // Inside a known file the span ends where the file does (or a bound
    // past the read): stream readahead is for blobs without extents.
    bool in_file = policy_.max_file_fetch > 0 && layers::extent_at(state->extents, offset);
    if (!in_file && ahead > 0)
      while (span.last + 1 < chunks && (span.last + 1) * chunk < offset + len + ahead)
        ++span.last;
    // Requests queue at the registry: this one carries the next files too.
    if (in_file && policy_.neighbour_window > 0 && others >= policy_.busy_readers)
      span = neighbour_span(state->extents, span, offset, chunk, policy_.neighbour_window,
                            [&](uint64_t index) { return !cache_->holds(hex, index); });
    // Its missing chunks in one request per stretch, not one per chunk.
    if (span.last > span.first) {
      std::vector<chunk_request> run;
      for (uint64_t index = span.first; index <= span.last; ++index)
        run.push_back(make(index));
      cache_->fetch_missing(
          run,
          [&](const chunk_request& first_req, uint64_t length) {
            return fetcher->fetch(*state->src, first_req.index * chunk, uint32_t(length));
          },
          policy_.max_gap);
    }
  }
  size_t done = 0;
  for (uint64_t index = first; index <= last; ++index) {
    auto req = make(index);
    uint64_t pos = offset + done;
    auto in_chunk = uint32_t(pos - req.index * chunk);
    auto take = uint32_t(std::min<uint64_t>(len - done, req.length - in_chunk));
    auto got = cache_->read(req, in_chunk, take, out + done);
    if (!got)
      return got.err();
    done += *got;
  }
  return done;
}

status blob_fs::serve(const std::string& mount_dir, const std::function<void()>& on_mounted) {
  auto ops = make_operations();
  // allow_other: the kernel opens the blob for an EROFS mount on behalf of
  // whichever process mounts it; default_permissions lets the 0444 modes
  // decide. ro: nothing here is ever written.
  const char* argv[] = {"dsec-lazyfs", "-o",
                        "ro,allow_other,default_permissions,fsname=dsec-lazy,subtype=dsec-lazy"};
  struct fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  struct fuse* f = fuse_new(&args, &ops, sizeof ops, this);
  fuse_opt_free_args(&args);
  if (!f)
    return internal_error("lazyfs: fuse_new failed (see the log above)");
  if (fuse_mount(f, mount_dir.c_str()) != 0) {
    fuse_destroy(f);
    return unavailable("lazyfs: mount FUSE on " + mount_dir + " failed (is /dev/fuse there?)");
  }
  struct fuse_session* se = fuse_get_session(f);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_unmount(f);
    fuse_destroy(f);
    return internal_error("lazyfs: cannot install the signal handlers");
  }
  if (on_mounted)
    on_mounted();
  // Several threads: a read that waits on the registry must not hold up
  // reads of cached chunks. At most 32 at once (each waits at most ~20 s).
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 32);
  fuse_loop_cfg_set_idle_threads(cfg, 4);
  int rc = fuse_loop_mt(f, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_remove_signal_handlers(se);
  fuse_unmount(f);
  fuse_destroy(f);
  if (rc < 0)
    return internal_error("lazyfs: the FUSE loop on " + mount_dir + " failed: "
                          + std::strerror(-rc));
  return {};
}

} // namespace dsec::lazyfs
