// Several init launchers (see launcher_pool.hpp).
#include "backends/container/launcher_pool.hpp"

#include <cstdlib>
#include <string>

namespace dsec::backends {

expected<size_t> launchers_env() {
  const char* v = std::getenv("DSEC_LAUNCHERS");
  if (!v)
    return default_launchers;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < 1 || n > 64)
    return invalid_argument(std::string{"node: DSEC_LAUNCHERS must be a whole number from 1 to "
                                        "64 (threads that start sandbox inits), not \""}
                            + v + "\"");
  return static_cast<size_t>(n);
}

std::unique_ptr<launcher_pool> launcher_pool::start(size_t n, bool mount_template,
                                                    bool sysfs_template) {
  std::unique_ptr<launcher_pool> p(new launcher_pool);
  for (size_t i = 0; i < n; ++i)
    if (auto l = init_launcher::start(mount_template, sysfs_template)) {
      p->free_.push_back(l.get());
      p->all_.push_back(std::move(l));
    }
  if (p->all_.empty())
    return nullptr;
  return p;
}

launcher_pool::lease launcher_pool::acquire() {
  std::unique_lock<std::mutex> g(m_);
  cv_.wait(g, [&] { return !free_.empty(); });
  auto* l = free_.back();
  free_.pop_back();
  return lease{this, l};
}

void launcher_pool::give_back(init_launcher* l) {
  {
    std::lock_guard<std::mutex> g(m_);
    free_.push_back(l);
  }
  cv_.notify_one();
}

} // namespace dsec::backends
