// Several init launchers (launch.hpp), so concurrent creates do not queue
// behind one thread.
//
// Why: a launch is a short serial step (pidfd_getfd of a few descriptors, a
// clone into five new namespaces, the child's cgroup joins and execveat,
// about a millisecond of CPU on an idle host), but every create passes
// through it. On a host shared with other work, each of its wake-ups waits
// for a CPU: at load 27-34 on 2 cores a create spent 108-358 ms waiting for
// and inside the one launcher (16 in flight), more than everything else of
// its create together, and the node's rate followed the host's load, not its
// own work. With several launchers the creates in flight get as many serial
// lanes, and the share of CPU the scheduler gives the node is used.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/container/launch.hpp"
#include "core/error.hpp"

namespace dsec::backends {

/// How many launchers a node runs. 4: a couple more than this machine kind's
/// cores, so a lane waiting for the CPU does not hold up the others; each
/// costs a thread, a network namespace with a loopback, a mount namespace
/// and one sysfs superblock (launch_template.cpp), nothing per sandbox.
/// Fewer lanes make the create rate follow the host's load; more add nothing
/// once creates in flight rarely wait (16 in flight: at most 4 queued each).
constexpr size_t default_launchers = 4;

/// The launcher count DSEC_LAUNCHERS asks for (1..64; benches set 1 to
/// measure the single launcher), default_launchers if unset, or an error
/// naming the variable and the value.
expected<size_t> launchers_env();

/// A fixed set of started launchers; any free one takes the next launch.
class launcher_pool {
 public:
  /// `n` launchers with the given template parts. Null if none starts
  /// (callers then launch from their own thread, as without a launcher).
  static std::unique_ptr<launcher_pool> start(size_t n, bool mount_template = true,
                                              bool sysfs_template = true);

  /// One launcher, held by one create until the lease ends.
  class lease {
   public:
    lease(launcher_pool* pool, init_launcher* l) : pool_(pool), l_(l) {}
    lease(lease&& o) noexcept : pool_(o.pool_), l_(o.l_) { o.l_ = nullptr; }
    lease& operator=(lease&&) = delete;
    lease(const lease&) = delete;
    ~lease() {
      if (l_)
        pool_->give_back(l_);
    }
    init_launcher* operator->() const { return l_; }

   private:
    launcher_pool* pool_;
    init_launcher* l_;
  };

  /// A free launcher; waits while all are leased.
  lease acquire();

  size_t size() const { return all_.size(); }

 private:
  launcher_pool() = default;
  void give_back(init_launcher* l);

  std::vector<std::unique_ptr<init_launcher>> all_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<init_launcher*> free_;
};

} // namespace dsec::backends
