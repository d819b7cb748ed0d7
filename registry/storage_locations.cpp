// Storage locations of blobs behind registry redirects (see storage_locations.hpp).
#include "registry/storage_locations.hpp"

namespace dsec::registry {

namespace {
std::string key_of(const std::string& host, const std::string& digest) {
  return host + " " + digest;
}
} // namespace

std::optional<std::string> storage_locations::find(const std::string& host,
                                                   const std::string& digest,
                                                   clock::time_point now) {
  std::lock_guard<std::mutex> guard{mu_};
  auto it = by_key_.find(key_of(host, digest));
  if (it == by_key_.end())
    return std::nullopt;
  if (now >= it->second.until) {
    by_key_.erase(it);
    return std::nullopt;
  }
  return it->second.url;
}

void storage_locations::remember(const std::string& host, const std::string& digest,
                                 const std::string& url, clock::time_point now) {
  std::lock_guard<std::mutex> guard{mu_};
  if (by_key_.size() >= max_entries) {
    for (auto it = by_key_.begin(); it != by_key_.end();)
      it = now >= it->second.until ? by_key_.erase(it) : std::next(it);
    if (by_key_.size() >= max_entries)
      by_key_.clear();
  }
  by_key_[key_of(host, digest)] = {url, now + ttl};
}

void storage_locations::forget(const std::string& host, const std::string& digest) {
  std::lock_guard<std::mutex> guard{mu_};
  by_key_.erase(key_of(host, digest));
}

size_t storage_locations::size() const {
  std::lock_guard<std::mutex> guard{mu_};
  return by_key_.size();
}

} // namespace dsec::registry
