// Range reads of lazy blobs from their registries (see registry_fetcher.hpp).
#include "lazyfs/registry_fetcher.hpp"

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

} // namespace dsec::lazyfs
