// The chunk cache (see chunk_cache.hpp).
#include "lazyfs/chunk_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "layers/digest.hpp"
#include "lazyfs/fetch_plan.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::lazyfs {

/// A fetch other readers of the same chunk wait for.
struct chunk_cache::inflight {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::shared_ptr<const std::string> data;
  error err;
};

namespace {

bool is_hex64(const std::string& s) {
  return s.size() == 64
         && std::all_of(s.begin(), s.end(), [](char c) {
              return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            });
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 20
         && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

} // namespace

chunk_cache::chunk_cache(std::string dir, uint64_t budget, retry_policy retry)
  : dir_(std::move(dir)), budget_(budget), retry_(std::move(retry)) {
}

expected<std::unique_ptr<chunk_cache>> chunk_cache::open(const std::string& dir,
                                                         uint64_t budget_bytes,
                                                         retry_policy retry) {
  if (dir.empty() || dir[0] != '/')
    return invalid_argument("chunk cache: directory \"" + dir + "\" must be an absolute path");
  if (retry.attempts < 1)
    return invalid_argument("chunk cache: a fetch needs at least one attempt");
  for (auto& d : {dir, dir + "/blobs"})
    if (auto st = sys::make_dirs(d, 0700); !st)
      return error{st.err().code, "chunk cache: " + st.err().message};
  // A chunk file per chunk, as older nodes kept them: never read again.
  for (auto old : {"/chunks", "/tmp"})
    (void)sys::remove_tree(dir + old);
  std::unique_ptr<chunk_cache> c{new chunk_cache(dir, budget_bytes, std::move(retry))};
  if (auto st = c->load_existing(); !st)
    return st.err();
  return c;
}

namespace {

/// "<64 hex>-<chunk size>": the blob and its chunk size; false otherwise.
bool parse_file_name(const std::string& name, std::string& hex, uint32_t& chunk_size) {
  auto dash = name.find('-');
  if (dash == std::string::npos || !is_hex64(name.substr(0, dash)) || !is_number(name.substr(dash + 1)))
    return false;
  auto size = std::stoull(name.substr(dash + 1));
  if (size == 0 || size > (1u << 30))
    return false;
  hex = name.substr(0, dash);
  chunk_size = uint32_t(size);
  return true;
}

/// A chunk no longer than its blob's chunk size, which is set.
status check_size(const chunk_request& req) {
  if (req.chunk_size == 0 || req.length > req.chunk_size)
    return invalid_argument("chunk cache: chunk " + std::to_string(req.index) + " of sha256:"
                            + req.blob + " has " + std::to_string(req.length)
                            + " bytes in a chunk size of " + std::to_string(req.chunk_size));
  return {};
}

uint64_t block_of(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && st.st_blksize > 0 ? uint64_t(st.st_blksize) : 4096;
}

} // namespace

status chunk_cache::load_existing() {
  std::vector<std::pair<int64_t, key>> order;
  for (auto& name : list_dir(dir_ + "/blobs"))
    adopt_file(name, order);
  // Least recently written files first, so the newest end up most recently used.
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::lock_guard<std::mutex> guard{mu_};
  for (auto& [when, k] : order)
    lru_.splice(lru_.begin(), lru_, entries_.at(k).lru);
  evict_locked();
  return {};
}

void chunk_cache::adopt_file(const std::string& name,
                             std::vector<std::pair<int64_t, key>>& order) {
  auto path = dir_ + "/blobs/" + name;
  std::string hex;
  uint32_t chunk_size = 0;
  struct stat st;
  if (!parse_file_name(name, hex, chunk_size) || ::lstat(path.c_str(), &st) != 0
      || !S_ISREG(st.st_mode) || files_.count(hex)) {
    (void)sys::remove_tree(path);
    return;
  }
  auto file = std::make_shared<blob_file>();
  file->fd = sys::unique_fd{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (!file->fd) {
    ::unlink(path.c_str());
    return;
  }
  file->path = path;
  file->chunk_size = chunk_size;
  file->block = block_of(file->fd.get());
  // The data extents: a chunk is held where all its bytes are data (a
  // chunk whose write a crash cut short has a hole in it).
  const auto size = uint64_t(st.st_size);
  int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  off_t pos = 0;
  std::lock_guard<std::mutex> guard{mu_};
  while (uint64_t(pos) < size) {
    off_t data = ::lseek(file->fd.get(), pos, SEEK_DATA);
    if (data < 0)
      break;
    off_t hole = ::lseek(file->fd.get(), data, SEEK_HOLE);
    if (hole < 0)
      hole = off_t(size);
    for (uint64_t index = (uint64_t(data) + chunk_size - 1) / chunk_size;; ++index) {
      uint64_t start = index * chunk_size, end = std::min<uint64_t>(start + chunk_size, size);
      if (end > uint64_t(hole) || start >= end)
        break;
      key k{hex, index};
      lru_.push_front(k);
      entries_[k] = entry{end - start, lru_.begin(), file, 0, false};
      counters_.cache_bytes += end - start;
      counters_.cache_chunks += 1;
      file->chunks += 1;
      order.emplace_back(mtime, k);
    }
    pos = hole;
  }
  if (file->chunks == 0) {
    ::unlink(path.c_str());
    return;
  }
  files_[hex] = std::move(file);
}

expected<std::shared_ptr<chunk_cache::blob_file>>
chunk_cache::file_locked(const chunk_request& req) {
  if (auto st = check_size(req); !st)
    return st.err();
  if (auto it = files_.find(req.blob); it != files_.end()) {
    if (it->second->chunk_size != req.chunk_size)
      return invalid_argument("chunk cache: blob sha256:" + req.blob + " is cached in chunks of "
                              + std::to_string(it->second->chunk_size) + " bytes, read in chunks of "
                              + std::to_string(req.chunk_size));
    return it->second;
  }
  auto file = std::make_shared<blob_file>();
  file->path = dir_ + "/blobs/" + req.blob + "-" + std::to_string(req.chunk_size);
  file->fd = sys::unique_fd{::open(file->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (!file->fd)
    return sys_error("chunk cache: open", file->path, errno);
  file->chunk_size = req.chunk_size;
  file->block = block_of(file->fd.get());
  files_[req.blob] = file;
  return file;
}

void chunk_cache::insert_locked(const key& k, uint64_t size,
                                const std::shared_ptr<blob_file>& file) {
  if (auto it = entries_.find(k); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  if (auto f = files_.find(k.first); f == files_.end() || f->second != file)
    return;
  lru_.push_front(k);
  entries_[k] = entry{size, lru_.begin(), file, 0, true};
  file->chunks += 1;
  counters_.cache_bytes += size;
  counters_.cache_chunks += 1;
  evict_locked();
}

void chunk_cache::erase_locked(std::map<key, entry>::iterator it) {
  auto file = it->second.file;
  const std::string hex = it->first.first;
  const uint64_t start = it->first.second * file->chunk_size;
  counters_.cache_bytes -= it->second.size;
  counters_.cache_chunks -= 1;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  if (--file->chunks == 0) {
    // Its last chunk: the file goes (a store into it meanwhile is not entered).
    ::unlink(file->path.c_str());
    if (auto f = files_.find(hex); f != files_.end() && f->second == file)
      files_.erase(f);
    return;
  }
  // Whole blocks only: a block shared with a neighbour chunk keeps its bytes.
  uint64_t from = (start + file->block - 1) / file->block * file->block;
  uint64_t to = (start + file->chunk_size) / file->block * file->block;
  if (to > from)
    (void)::fallocate(file->fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(from),
                      off_t(to - from));
}

void chunk_cache::evict_locked() {
  // Least recently used first; a chunk a reader copies from now is skipped.
  for (auto victim = lru_.end(); counters_.cache_bytes > budget_ && victim != lru_.begin();) {
    --victim;
    auto it = entries_.find(*victim);
    if (it->second.pins > 0)
      continue;
    auto after = std::next(victim);
    erase_locked(it);
    counters_.evictions += 1;
    victim = after;
  }
}

bool chunk_cache::read_stored(const chunk_request& req, uint32_t off, uint32_t len, char* out) {
  key k{req.blob, req.index};
  std::shared_ptr<blob_file> file;
  bool check = false;
  {
    std::lock_guard<std::mutex> guard{mu_};
    auto it = entries_.find(k);
    if (it == entries_.end())
      return false;
    // Not the chunk asked for (a write a crash cut short at the file's end).
    if (it->second.size != req.length || it->second.file->chunk_size != req.chunk_size) {
      if (it->second.pins == 0)
        erase_locked(it);
      return false;
    }
    it->second.pins += 1;
    file = it->second.file;
    check = !it->second.verified;
  }
  const uint64_t start = req.index * req.chunk_size;
  bool ok = true;
  if (check) {
    // Found at open: the whole chunk against its digest, once.
    std::string all(req.length, '\0');
    ok = sys::pread_all(file->fd.get(), all.data(), all.size(), start)
         && (req.sha256.empty() || layers::digest_hex(layers::sha256_string(all)) == req.sha256);
    if (ok)
      std::memcpy(out, all.data() + off, len);
  } else {
    ok = sys::pread_all(file->fd.get(), out, len, start + off);
  }
  std::lock_guard<std::mutex> guard{mu_};
  if (auto it = entries_.find(k); it != entries_.end()) {
    it->second.pins -= 1;
    if (ok)
      it->second.verified = true;
    else if (it->second.pins == 0)
      erase_locked(it);
  }
  return ok;
}

std::string chunk_cache::verify(const chunk_request& req, std::string_view got) {
  std::string why;
  if (got.size() != req.length)
    why = "answered " + std::to_string(got.size()) + " bytes, the chunk has "
          + std::to_string(req.length);
  else if (!req.sha256.empty() && layers::digest_hex(layers::sha256_string(got)) != req.sha256)
    why = "has sha256 " + layers::digest_hex(layers::sha256_string(got))
          + ", the chunk list records " + req.sha256;
  if (!why.empty()) {
    std::lock_guard<std::mutex> guard{mu_};
    counters_.verify_failures += 1;
  }
  return why;
}

expected<std::string> chunk_cache::fetch_attempts(
    const std::string& what, const std::function<expected<std::string>()>& attempt,
    const std::function<std::string(const std::string&)>& check) {
  auto start = std::chrono::steady_clock::now();
  error last = unavailable("fetch " + what + ": no attempt made");
  for (int n = 0; n < retry_.attempts; ++n) {
    if (n > 0) {
      auto pause = retry_.backoff.empty()
                     ? std::chrono::milliseconds{0}
                     : retry_.backoff[std::min<size_t>(n - 1, retry_.backoff.size() - 1)];
      if (std::chrono::steady_clock::now() - start + pause > retry_.deadline)
        break;
      std::this_thread::sleep_for(pause);
    }
    auto t0 = std::chrono::steady_clock::now();
    auto got = attempt();
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - t0);
    {
      std::lock_guard<std::mutex> guard{mu_};
      counters_.range_requests += 1;
      counters_.fetch_us += uint64_t(us.count());
      if (got)
        counters_.bytes_fetched += got->size();
    }
    if (!got) {
      last = error{got.err().code, "fetch " + what + ": " + got.err().message};
      continue;
    }
    auto why = check(*got);
    if (why.empty())
      return got;
    last = unavailable("fetch " + what + ": the range " + why);
  }
  return error{last.code, last.message + " (after " + std::to_string(retry_.attempts)
                            + " attempts)"};
}

expected<std::string> chunk_cache::fetch_verified(const chunk_request& req) {
  return fetch_attempts(
      "chunk " + std::to_string(req.index) + " of blob sha256:" + req.blob,
      [&]() -> expected<std::string> {
        if (!req.fetch)
          return internal_error("the request has no fetch");
        return req.fetch();
      },
      [&](const std::string& got) { return verify(req, got); });
}

expected<std::shared_ptr<chunk_cache::blob_file>>
chunk_cache::store(const chunk_request& first, const char* data, size_t len) {
  std::shared_ptr<blob_file> file;
  {
    std::lock_guard<std::mutex> guard{mu_};
    auto f = file_locked(first);
    if (!f)
      return f.err();
    file = *f;
  }
  // No fsync: a chunk lost in a host crash is a hole, fetched again.
  if (!sys::pwrite_all(file->fd.get(), data, len, first.index * first.chunk_size))
    return sys_error("chunk cache: write", file->path, errno);
  return file;
}

expected<size_t> chunk_cache::read(const chunk_request& req, uint32_t off, uint32_t len,
                                   char* out) {
  if (uint64_t(off) + len > req.length)
    return invalid_argument("chunk cache: read of [" + std::to_string(off) + ", +"
                            + std::to_string(len) + ") past chunk " + std::to_string(req.index)
                            + " of " + std::to_string(req.length) + " bytes");
  if (auto st = check_size(req); !st)
    return st.err();
  key k{req.blob, req.index};
  std::shared_ptr<inflight> wait_for;
  bool fetcher = false;
  for (int pass = 0; pass < 2; ++pass) {
    {
      std::lock_guard<std::mutex> guard{mu_};
      if (auto it = entries_.find(k); it != entries_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        counters_.hits += 1;
      } else {
        counters_.misses += 1;
        if (auto f = failed_.find(k); f != failed_.end()) {
          if (std::chrono::steady_clock::now() - f->second.first < retry_.failure_hold) {
            counters_.read_errors += 1;
            return f->second.second;
          }
          failed_.erase(f);
        }
        if (auto f = inflight_.find(k); f != inflight_.end()) {
          wait_for = f->second;
        } else {
          wait_for = std::make_shared<inflight>();
          inflight_[k] = wait_for;
          fetcher = true;
        }
      }
    }
    if (wait_for)
      break;
    // Held: copied from its file. Evicted meanwhile, or it failed its
    // check (dropped then): fetched.
    if (read_stored(req, off, len, out))
      return size_t{len};
  }
  if (!wait_for)
    return internal_error("chunk cache: chunk " + std::to_string(req.index) + " of sha256:"
                          + req.blob + " vanished twice while being read");
  if (fetcher) {
    auto data = complete(req, wait_for, fetch_verified(req));
    if (!data)
      return data.err();
    std::memcpy(out, (*data)->data() + off, len);
    return size_t{len};
  }
  std::unique_lock<std::mutex> lock{wait_for->mu};
  wait_for->cv.wait(lock, [&] { return wait_for->done; });
  if (!wait_for->data) {
    std::lock_guard<std::mutex> guard{mu_};
    counters_.read_errors += 1;
    return wait_for->err;
  }
  std::memcpy(out, wait_for->data->data() + off, len);
  return size_t{len};
}

expected<std::shared_ptr<const std::string>>
chunk_cache::complete(const chunk_request& req, const std::shared_ptr<inflight>& flight,
                      expected<std::string> got) {
  // A chunk that could not be stored (disk full) still serves this read.
  std::shared_ptr<blob_file> file;
  if (got)
    if (auto stored = store(req, got->data(), got->size()); stored)
      file = *stored;
  return finish(req, flight, std::move(got), file);
}

expected<std::shared_ptr<const std::string>>
chunk_cache::finish(const chunk_request& req, const std::shared_ptr<inflight>& flight,
                    expected<std::string> got, const std::shared_ptr<blob_file>& file) {
  key k{req.blob, req.index};
  std::shared_ptr<const std::string> data;
  error err;
  if (got)
    data = std::make_shared<const std::string>(std::move(*got));
  else
    err = got.err();
  {
    std::lock_guard<std::mutex> guard{mu_};
    inflight_.erase(k);
    if (data && file)
      insert_locked(k, data->size(), file);
    if (data) {
      counters_.chunks_fetched += 1;
    } else {
      counters_.read_errors += 1;
      failed_[k] = {std::chrono::steady_clock::now(), err};
    }
  }
  {
    std::lock_guard<std::mutex> guard{flight->mu};
    flight->done = true;
    flight->data = data;
    flight->err = data ? error{} : err;
    flight->cv.notify_all();
  }
  if (!data)
    return err;
  return data;
}

void chunk_cache::fetch_missing(const std::vector<chunk_request>& run,
                                const range_fetch& fetch_range, uint64_t max_gap) {
  if (run.empty())
    return;
  // Claim every chunk nobody holds, fetches or recently failed.
  std::vector<std::shared_ptr<inflight>> claimed(run.size());
  std::vector<bool> missing(run.size(), false);
  bool any = false;
  {
    std::lock_guard<std::mutex> guard{mu_};
    auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < run.size(); ++i) {
      key k{run[i].blob, run[i].index};
      if (entries_.count(k) || inflight_.count(k))
        continue;
      if (auto f = failed_.find(k);
          f != failed_.end() && now - f->second.first < retry_.failure_hold)
        continue;
      claimed[i] = std::make_shared<inflight>();
      inflight_[k] = claimed[i];
      missing[i] = true;
      any = true;
    }
  }
  if (!any)
    return;
  // One range request per planned span: consecutive claimed chunks, joined
  // across short runs of chunks held elsewhere (their bytes are dropped).
  for (const auto& span :
       plan_spans(run.front().index, missing, run.front().chunk_size, max_gap)) {
    size_t a = size_t(span.first - run.front().index), b = size_t(span.last - run.front().index);
    if (a == b) {
      (void)complete(run[a], claimed[a], fetch_verified(run[a]));
      continue;
    }
    uint64_t length = 0;
    for (size_t i = a; i <= b; ++i)
      length += run[i].length;
    auto got = fetch_attempts(
        "chunks " + std::to_string(span.first) + ".." + std::to_string(span.last)
          + " of blob sha256:" + run[a].blob,
        [&] { return fetch_range(run[a], length); },
        [&](const std::string& got) {
          return got.size() == length ? std::string{}
                                      : "answered " + std::to_string(got.size())
                                          + " bytes, the chunks have " + std::to_string(length);
        });
    if (!got) {
      for (size_t i = a; i <= b; ++i)
        if (claimed[i])
          (void)finish(run[i], claimed[i], got.err(), nullptr);
      continue;
    }
    // Each claimed chunk verified; a chunk the span got wrong is fetched
    // again on its own. The good ones are stored a stretch at a time (one
    // write for consecutive chunks).
    std::vector<uint64_t> at(b - a + 2, 0);
    std::vector<bool> good(b - a + 1, false);
    for (size_t i = a; i <= b; ++i) {
      at[i - a + 1] = at[i - a] + run[i].length;
      good[i - a] = claimed[i]
                  && verify(run[i], std::string_view(*got).substr(at[i - a], run[i].length)).empty();
    }
    for (size_t i = a; i <= b;) {
      if (!claimed[i]) {
        ++i;  // held or fetched by another reader: a gap we joined across
        continue;
      }
      if (!good[i - a]) {
        (void)complete(run[i], claimed[i], fetch_verified(run[i]));
        ++i;
        continue;
      }
      size_t end = i;
      while (end + 1 <= b && good[end + 1 - a])
        ++end;
      auto stored = store(run[i], got->data() + at[i - a], at[end - a + 1] - at[i - a]);
      for (size_t j = i; j <= end; ++j)
        (void)finish(run[j], claimed[j], got->substr(at[j - a], run[j].length),
                     stored ? *stored : nullptr);
      i = end + 1;
    }
  }
}

bool chunk_cache::holds(const std::string& blob, uint64_t index) const {
  std::lock_guard<std::mutex> guard{mu_};
  return entries_.count(key{blob, index}) != 0;
}

cache_counters chunk_cache::counters() const {
  std::lock_guard<std::mutex> guard{mu_};
  return counters_;
}

} // namespace dsec::lazyfs
