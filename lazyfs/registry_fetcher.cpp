// Range reads of lazy blobs from their registries (see registry_fetcher.hpp).
#include "lazyfs/registry_fetcher.hpp"

#include <iostream>

namespace dsec::lazyfs {

registry_fetcher::registry_fetcher(registry::registry_options opts) : opts_(std::move(opts)) {
  if (opts_.request_timeout > range_request_timeout)
    opts_.request_timeout = range_request_timeout;
}

expected<std::shared_ptr<registry::registry_client>>
registry_fetcher::client(const std::string& host) {
  std::lock_guard<std::mutex> guard{mu_};
  if (auto it = clients_.find(host); it != clients_.end())
    return it->second;
  auto c = registry::registry_client::open(host, opts_);
  if (!c)
    return c.err();
  clients_[host] = *c;
  return *c;
}

expected<std::string> registry_fetcher::fetch(const registry::blob_source& src, uint64_t offset,
                                              uint32_t len) {
  auto c = client(src.registry);
  if (!c)
    return c.err();
  return (*c)->get_blob_range(src.repository, src.digest, offset, len);
}

expected<std::vector<std::string>> registry_fetcher::fetch_ranges(
  const registry::blob_source& src, const std::vector<registry::byte_range>& ranges) {
  auto c = client(src.registry);
  if (!c)
    return c.err();
  {
    std::lock_guard<std::mutex> guard{mu_};
    if (single_range_.count(src.registry))
      return range_fetcher::fetch_ranges(src, ranges);
  }
  auto got = (*c)->get_blob_ranges(src.repository, src.digest, ranges);
  if (got || (got.err().code != errc::invalid_argument && got.err().code != errc::too_large))
    return got;
  std::cerr << "dsec lazyfs: " << got.err().message
            << "; asking this registry for one range per request from now on" << std::endl;
  {
    std::lock_guard<std::mutex> guard{mu_};
    single_range_.insert(src.registry);
  }
  return range_fetcher::fetch_ranges(src, ranges);
}

uint64_t registry_fetcher::storage_reads() const {
  std::lock_guard<std::mutex> guard{mu_};
  uint64_t n = 0;
  for (const auto& [host, c] : clients_)
    n += c->stats().storage_reads;
  return n;
}

} // namespace dsec::lazyfs
