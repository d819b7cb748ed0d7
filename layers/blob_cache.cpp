// blob_cache implementation (see blob_cache.hpp). The record file is
//   {"version":1,"fetched":{"sha256:..":{"size":123,"last_use_ms":1700000000000,"seq":7}}}
// written atomically on every fetch and eviction (rare events); last-use
// times move in memory on every touch and reach the file with the next write
// (after a crash, LRU order is at worst a little stale).
#include "layers/blob_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/clock.hpp"
#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

namespace {

/// The data blob image `digest` names ("" for a self-contained image).
std::string data_digest_of(const store& st, const std::string& digest) {
  auto ref = read_data_blob_ref(st.blob_path(digest));
  return ref ? ref->digest : std::string{};
}

} // namespace

bool layer_present(const store& st, const std::string& digest) {
  auto image = st.blob_path(digest);
  if (image.empty() || !sys::exists(image))
    return false;
  auto data = data_digest_of(st, digest);
  return data.empty() || sys::exists(data_blob_path(image, data));
}

blob_cache::blob_cache(std::shared_ptr<store> st, in_use_fn in_use, uint64_t budget_bytes,
                       std::string record_path)
  : store_(std::move(st)), in_use_(std::move(in_use)), budget_(budget_bytes),
    record_path_(std::move(record_path)) {}

status blob_cache::load() {
  auto text = sys::read_file(record_path_);
  if (!text)
    return text.err().code == errc::not_found ? status{} : status{text.err()};
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("fetched") || !j["fetched"].is_object())
    return internal_error("layer cache record " + record_path_
                          + ": not a JSON object with a \"fetched\" map; ignoring it");
  std::lock_guard<std::mutex> guard{mu_};
  std::vector<std::tuple<int64_t, uint64_t, std::string>> order;
  for (auto& [digest, v] : j["fetched"].items()) {
    if (!is_valid_digest(digest) || !v.is_object() || !sys::exists(store_->blob_path(digest)))
      continue;
    entry e;
    e.size = v.value("size", uint64_t{0});
    e.last_use_ms = v.value("last_use_ms", int64_t{0});
    fetched_[digest] = e;
    // Uses within one millisecond keep their order through "seq".
    order.emplace_back(e.last_use_ms, v.value("seq", uint64_t{0}), digest);
  }
  std::sort(order.begin(), order.end());
  for (auto& [ms, seq, digest] : order)
    fetched_[digest].seq = ++seq_;
  return {};
}

status blob_cache::save_locked() const {
  nlohmann::json f = nlohmann::json::object();
  for (auto& [digest, e] : fetched_)
    f[digest] = {{"size", e.size}, {"last_use_ms", e.last_use_ms}, {"seq", e.seq}};
  nlohmann::json j = {{"version", 1}, {"fetched", f}};
  return sys::write_file_atomic(record_path_, j.dump());
}

void blob_cache::record_fetched(const std::string& digest, uint64_t size) {
  std::lock_guard<std::mutex> guard{mu_};
  auto& e = fetched_[digest];
  e.size = size;
  e.last_use_ms = now_ms();
  e.seq = ++seq_;
  (void)save_locked(); // best effort: a lost record only keeps an image longer
}

void blob_cache::touch(const std::string& digest) {
  std::lock_guard<std::mutex> guard{mu_};
  auto it = fetched_.find(digest);
  if (it == fetched_.end())
    return;
  it->second.last_use_ms = now_ms();
  it->second.seq = ++seq_;
}

void blob_cache::pin(const std::string& digest) {
  std::lock_guard<std::mutex> guard{mu_};
  ++pins_[digest];
}

void blob_cache::unpin(const std::string& digest) {
  std::lock_guard<std::mutex> guard{mu_};
  auto it = pins_.find(digest);
  if (it != pins_.end() && --it->second <= 0)
    pins_.erase(it);
}

uint64_t blob_cache::store_bytes() const {
  uint64_t total = 0;
  auto dir = store_->root() + "/blobs";
  DIR* d = ::opendir(dir.c_str());
  if (!d)
    return 0;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.')
      continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  }
  ::closedir(d);
  return total;
}

std::vector<std::string> blob_cache::evict(const std::string& keep) {
  std::vector<std::string> out;
  if (budget_ == 0)
    return out;
  auto total = store_bytes();
  if (total <= budget_)
    return out;
  std::lock_guard<std::mutex> guard{mu_};
  std::vector<std::pair<uint64_t, std::string>> lru;
  for (auto& [digest, e] : fetched_)
    lru.emplace_back(e.seq, digest);
  std::sort(lru.begin(), lru.end());
  for (auto& [seq, digest] : lru) {
    if (total <= budget_)
      break;
    if (digest == keep || pins_.count(digest) || (in_use_ && in_use_(digest)))
      continue;
    auto path = store_->blob_path(digest);
    auto data = data_digest_of(*store_, digest);
    struct stat st;
    uint64_t size = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      continue;
    total = total > size ? total - size : 0;
    if (!data.empty() && !data_blob_shared(data)) {
      auto data_path = data_blob_path(path, data);
      if (::stat(data_path.c_str(), &st) == 0 && ::unlink(data_path.c_str()) == 0)
        total = total > uint64_t(st.st_size) ? total - uint64_t(st.st_size) : 0;
    }
    fetched_.erase(digest);
    ++evictions_;
    out.push_back(digest);
  }
  if (!out.empty())
    (void)save_locked();
  return out;
}

bool blob_cache::data_blob_shared(const std::string& data) const {
  for (auto& l : store_->list())
    if (sys::exists(store_->blob_path(l.digest)) && data_digest_of(*store_, l.digest) == data)
      return true;
  return false;
}

bool blob_cache::is_fetched(const std::string& digest) const {
  std::lock_guard<std::mutex> guard{mu_};
  return fetched_.count(digest) > 0;
}

uint64_t blob_cache::evictions() const {
  std::lock_guard<std::mutex> guard{mu_};
  return evictions_;
}

} // namespace dsec::layers
