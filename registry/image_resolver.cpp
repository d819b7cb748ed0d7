// One pull per image however many creates ask (image_resolver.hpp).
//
// Single flight: a map from canonical reference to the shared state of the
// work in flight for it. The first asker inserts the state and starts the
// work on a thread of its own (detached: a pull takes seconds to minutes and
// must not hold a worker of the node's pool, nor a CAF scheduler thread);
// every asker, the first included, then waits on the state's condition
// variable until the result is in or its own deadline passes. A waiter that
// gives up leaves the work running: its result is recorded (images.json, the
// catalog) and the next create finds it there. The entry leaves the map when
// the work ends, so a failed pull is tried again by the next create. The
// work itself (images.json, the registry, pull and publish) is in
// image_resolver_work.cpp, so unit tests link this part alone.
#include "registry/image_resolver.hpp"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/image_reference.hpp"

namespace dsec::registry {

namespace {

/// The result of one image's work, shared by the work's thread and every
/// waiter (each holds a reference: a waiter that timed out may outlive the
/// resolver's map entry, the thread may outlive the resolver).
struct flight {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  error err;
  layer_info info;
};

std::string seconds_text(std::chrono::steady_clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

/// `err` with "image REF: " in front unless its message names the image
/// already, the code kept (not_found stays a 404, unavailable a 503).
error about(const image_reference& ref, error err) {
  auto name = ref.str();
  if (err.message.find(name) == std::string::npos)
    err.message = "image " + name + ": " + err.message;
  return err;
}

} // namespace

struct image_resolver::impl {
  work_fn work;
  std::mutex m;
  std::map<std::string, std::shared_ptr<flight>> flights;
  /// Set by stop(); waiters read it under their flight's lock.
  std::atomic<bool> stopping{false};
};

image_resolver::image_resolver(work_fn work) : impl_(std::make_shared<impl>()) {
  impl_->work = std::move(work);
}

image_resolver::~image_resolver() = default;

expected<layer_info> image_resolver::resolve(const std::string& image,
                                             std::chrono::steady_clock::time_point deadline) {
  auto ref = parse_image_reference(image);
  if (!ref)
    return error{ref.err().code, "image \"" + image.substr(0, 300) + "\": " + ref.err().message};
  auto key = ref->str();
  if (impl_->stopping)
    return unavailable("image " + key + ": the node is stopping");
  std::shared_ptr<flight> f;
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    auto& slot = impl_->flights[key];
    if (!slot) {
      slot = f = std::make_shared<flight>();
      // The thread keeps the shared state alive, not the resolver: a node
      // that stops while a pull runs does not wait for it.
      std::thread([core = impl_, f, ref = *ref, key] {
        auto r = core->work(ref);
        {
          std::lock_guard<std::mutex> lock(core->m);
          core->flights.erase(key);
        }
        std::lock_guard<std::mutex> lock(f->m);
        if (r)
          f->info = std::move(*r);
        else
          f->err = about(ref, r.err());
        f->done = true;
        f->cv.notify_all();
      }).detach();
    } else {
      f = slot;
    }
  }
  auto asked = std::chrono::steady_clock::now();
  auto& core = *impl_;
  std::unique_lock<std::mutex> lock(f->m);
  if (!f->cv.wait_until(lock, deadline, [&] { return f->done || core.stopping; }))
    return error{errc::timeout, "image " + key + ": not resolved within "
                                  + seconds_text(std::chrono::steady_clock::now() - asked)
                                  + ", the create's timeout (its pull goes on; a later create "
                                    "finds the image once it is in)"};
  if (!f->done)
    return unavailable("image " + key + ": the node is stopping");
  if (f->err)
    return f->err;
  return f->info;
}

void image_resolver::stop() {
  impl_->stopping = true;
  std::vector<std::shared_ptr<flight>> all;
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    for (auto& [key, f] : impl_->flights)
      all.push_back(f);
  }
  for (auto& f : all) {
    std::lock_guard<std::mutex> lock(f->m); // no waiter between its check and its wait
    f->cv.notify_all();
  }
}

} // namespace dsec::registry
