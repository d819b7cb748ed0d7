// The chunk cache (see chunk_cache.hpp).
#include "lazyfs/chunk_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
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
  for (auto& d : {dir, dir + "/chunks", dir + "/tmp"})
    if (auto st = sys::make_dirs(d, 0700); !st)
      return error{st.err().code, "chunk cache: " + st.err().message};
  std::unique_ptr<chunk_cache> c{new chunk_cache(dir, budget_bytes, std::move(retry))};
  if (auto st = c->load_existing(); !st)
    return st.err();
  return c;
}

std::string chunk_cache::chunk_path(const key& k) const {
  return dir_ + "/chunks/" + k.first + "/" + std::to_string(k.second);
}

status chunk_cache::load_existing() {
  // Temp files are chunks a crashed run did not finish: never valid.
  for (auto& name : list_dir(dir_ + "/tmp"))
    ::unlink((dir_ + "/tmp/" + name).c_str());
  struct found {
    int64_t mtime_ns;
    key k;
    uint64_t size;
  };
  std::vector<found> all;
  for (auto& blob : list_dir(dir_ + "/chunks")) {
    auto blob_dir = dir_ + "/chunks/" + blob;
    if (!is_hex64(blob)) {
      (void)sys::remove_tree(blob_dir);
      continue;
    }
    for (auto& name : list_dir(blob_dir)) {
      auto path = blob_dir + "/" + name;
      struct stat st;
      if (!is_number(name) || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)sys::remove_tree(path);
        continue;
      }
      all.push_back({int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                     {blob, std::stoull(name)}, uint64_t(st.st_size)});
    }
  }
  // Oldest first, so the newest end up most recently used.
  std::sort(all.begin(), all.end(),
            [](const found& a, const found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard<std::mutex> guard{mu_};
  for (auto& f : all)
    insert_locked(f.k, f.size);
  return {};
}

void chunk_cache::insert_locked(const key& k, uint64_t size) {
  if (auto it = entries_.find(k); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  lru_.push_front(k);
  entries_[k] = entry{size, lru_.begin()};
  counters_.cache_bytes += size;
  counters_.cache_chunks += 1;
  evict_locked();
}

void chunk_cache::evict_locked() {
  while (counters_.cache_bytes > budget_ && !lru_.empty()) {
    auto victim = lru_.back();
    lru_.pop_back();
    auto it = entries_.find(victim);
    counters_.cache_bytes -= it->second.size;
    counters_.cache_chunks -= 1;
    entries_.erase(it);
    // A reader that opened the file already keeps reading it.
    ::unlink(chunk_path(victim).c_str());
    counters_.evictions += 1;
  }
}

bool chunk_cache::read_stored(const key& k, uint32_t length, uint32_t off, uint32_t len,
                              char* out) {
  sys::unique_fd fd{::open(chunk_path(k).c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0 || uint64_t(st.st_size) != length)
    return false;
  size_t done = 0;
  while (done < len) {
    auto n = ::pread(fd.get(), out + done, len - done, off + done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += size_t(n);
  }
  return true;
}

std::string chunk_cache::verify(const chunk_request& req, const std::string& got) {
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

status chunk_cache::store(const key& k, const std::string& data) {
  auto dir = dir_ + "/chunks/" + k.first;
  if (auto st = sys::make_dirs(dir, 0700); !st)
    return st;
  std::string tmp;
  {
    std::lock_guard<std::mutex> guard{mu_};
    tmp = dir_ + "/tmp/" + k.first.substr(0, 16) + "-" + std::to_string(k.second) + "-"
          + std::to_string(++tmp_seq_);
  }
  sys::unique_fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!fd)
    return sys_error("chunk cache: create", tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    auto n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto err = errno;
      ::unlink(tmp.c_str());
      return sys_error("chunk cache: write", tmp, err);
    }
    done += size_t(n);
  }
  // No fsync: a chunk lost in a host crash is fetched again; a torn one is
  // refused by the length check (and the digest when a list exists) at read.
  fd.reset();
  if (::rename(tmp.c_str(), chunk_path(k).c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error("chunk cache: rename", tmp, err);
  }
  return {};
}

expected<size_t> chunk_cache::read(const chunk_request& req, uint32_t off, uint32_t len,
                                   char* out) {
  if (uint64_t(off) + len > req.length)
    return invalid_argument("chunk cache: read of [" + std::to_string(off) + ", +"
                            + std::to_string(len) + ") past chunk " + std::to_string(req.index)
                            + " of " + std::to_string(req.length) + " bytes");
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
    if (read_stored(k, req.length, off, len, out))
      return size_t{len};
    // Evicted between the lookup and the open, or damaged: forget it and fetch.
    std::lock_guard<std::mutex> guard{mu_};
    if (auto it = entries_.find(k); it != entries_.end()) {
      counters_.cache_bytes -= it->second.size;
      counters_.cache_chunks -= 1;
      lru_.erase(it->second.lru);
      entries_.erase(it);
      ::unlink(chunk_path(k).c_str());
    }
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
  key k{req.blob, req.index};
  std::shared_ptr<const std::string> data;
  error err;
  if (got) {
    data = std::make_shared<const std::string>(std::move(*got));
    if (auto st = store(k, *data); !st)
      err = st.err();
  } else {
    err = got.err();
  }
  {
    std::lock_guard<std::mutex> guard{mu_};
    inflight_.erase(k);
    if (data && !err)
      insert_locked(k, data->size());
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
  // A chunk that could not be stored (disk full) still serves this read.
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
  const uint64_t chunk = run.front().length;
  for (const auto& span : plan_spans(run.front().index, missing, chunk, max_gap)) {
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
    uint64_t pos = 0;
    for (size_t i = a; i <= b; ++i) {
      const auto& req = run[i];
      uint64_t at = pos;
      pos += req.length;
      if (!claimed[i])
        continue;  // held or fetched by another reader: a gap we joined across
      if (!got) {
        (void)complete(req, claimed[i], got.err());
        continue;
      }
      auto piece = got->substr(at, req.length);
      // A chunk the span got wrong is fetched again on its own.
      if (auto why = verify(req, piece); !why.empty())
        (void)complete(req, claimed[i], fetch_verified(req));
      else
        (void)complete(req, claimed[i], std::move(piece));
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
