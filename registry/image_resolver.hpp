// The node's way from a spec's "image" to a layer ref: one pull per image
// however many creates wait for it. A create that names an image asks
// resolve(); the first asker starts the work on its own thread, later askers
// for the same canonical reference wait on the same result, each only until
// its own deadline (the create's timeout), while the work goes on for the
// others. The work, in order: images.json (no registry call at all), a
// conversion another node published (metadata only, data read on demand),
// else a full pull and convert here, then publish it for the others.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "core/image_reference.hpp"
#include "core/types.hpp"
#include "registry/registry_options.hpp"

namespace dsec::layers {
class store;
}

namespace dsec::registry {

struct resolver_options {
  registry_options registry;
  /// Publish what this node converted (off: never write to registries).
  bool publish = true;
  /// Read published data blobs on demand (off: download them whole, as on
  /// a node without FUSE). The node starts the lazy blob daemon (lazyfs/)
  /// before it creates the resolver, so a registered blob is always served.
  bool lazy = true;
};

class image_resolver {
 public:
  image_resolver(std::shared_ptr<layers::store> st, resolver_options opts);

  /// The work of one image: its layer in the store, however it got there.
  /// Blocking; runs on a thread of its own, once per canonical reference
  /// at a time.
  using work_fn = std::function<expected<layer_info>(const image_reference&)>;

  /// A resolver that runs `work` instead of the registry path above, with
  /// the same single flight and deadlines (unit tests).
  explicit image_resolver(work_fn work);

  ~image_resolver();

  /// The layer `image` (a reference string) resolves to, waiting at most
  /// until `deadline`: timeout names the image when it passes (the pull goes
  /// on). Blocking: worker threads only.
  expected<layer_info> resolve(const std::string& image,
                               std::chrono::steady_clock::time_point deadline);

  /// The node stops: every waiter (and every later resolve) gets
  /// unavailable at once, so no create holds the worker pool's join until
  /// its deadline. Work in flight ends on its own thread.
  void stop();

 private:
  struct impl;
  /// Shared with the work's threads, which may outlive the resolver.
  std::shared_ptr<impl> impl_;
};

} // namespace dsec::registry
