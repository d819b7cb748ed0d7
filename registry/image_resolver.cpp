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
// the work ends, so a failed pull is tried again by the next create.
#include "registry/image_resolver.hpp"

#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/clock.hpp"
#include "core/image_reference.hpp"
#include "layers/store.hpp"
#include "registry/image_index.hpp"
#include "registry/image_pull.hpp"
#include "registry/layer_artifact.hpp"
#include "registry/manifest.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

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

void log_line(const image_reference& ref, const std::string& what) {
  std::cerr << "dsec node: image " << ref.str() << ": " << what << std::endl;
}

/// The digest of the platform manifest (linux/amd64) `ref` names now: the
/// manifest's own, or for an index the entry it picks. One GET (the body
/// is small; a HEAD would give an index's digest and cost a second request).
expected<std::string> platform_digest(registry_client& client, const image_reference& ref) {
  auto what = ref.str();
  auto body = client.get_manifest(ref.repository, ref.manifest_ref());
  if (!body)
    return body.err();
  auto kind = classify_manifest(body->media_type, body->body, what);
  if (!kind)
    return kind.err();
  if (*kind != "index")
    return body->digest;
  auto index = parse_index(body->body, what);
  if (!index)
    return index.err();
  auto entry = pick_platform(*index, what);
  if (!entry)
    return entry.err();
  return entry->digest;
}

/// Layer `ref` if the store holds it whole (its catalog entry and its
/// image file).
std::optional<layer_info> held_layer(const layers::store& st, const std::string& ref) {
  auto l = st.resolve(ref);
  if (!l || !sys::exists(st.blob_path(l->digest)))
    return std::nullopt;
  return *l;
}

layer_info recorded(const layers::store& st, const image_reference& ref,
                    const layer_info& info, const std::string& manifest) {
  if (auto st2 = record_image(st, ref.str(), {info.ref, manifest, now_ms()}); !st2)
    log_line(ref, "resolved to " + info.ref + " but images.json was not written (the next "
                    "create asks the registry again): " + st2.err().message);
  return info;
}

/// The work of one image on this node (see image_resolver.hpp for the order).
expected<layer_info> resolve_here(layers::store& st, const resolver_options& opts,
                                  const image_reference& ref) {
  auto canonical = ref.str();
  auto known = find_image(st, canonical);
  if (!known)
    return known.err();
  if (*known)
    if (auto l = held_layer(st, (*known)->layer))
      return *l; // no registry call at all
  auto client = registry_client::open(ref.registry, opts.registry);
  if (!client)
    return client.err();
  auto digest = platform_digest(**client, ref);
  if (!digest)
    return digest.err();
  // Pulled before under another tag of the same manifest.
  if (auto l = held_layer(st, image_layer_ref(ref, *digest)))
    return recorded(st, ref, *l, *digest);
  if (opts.lazy) {
    auto conv = fetch_conversion(st, ref, *digest, opts.registry, true);
    if (conv) {
      log_line(ref, "using the conversion published for " + *digest + " (" + conv->ref + ")");
      return recorded(st, ref, *conv, *digest);
    }
    if (conv.err().code != errc::not_found)
      log_line(ref, "the published conversion could not be used, converting here: "
                      + conv.err().message);
  }
  log_line(ref, "pulling " + *digest);
  auto started = std::chrono::steady_clock::now();
  pull_options po;
  po.registry = opts.registry;
  auto pulled = pull_image(st, ref, po);
  if (!pulled)
    return pulled.err();
  log_line(ref, "pulled as " + pulled->info.ref + " in "
                  + seconds_text(std::chrono::steady_clock::now() - started) + " ("
                  + std::to_string(pulled->bytes_fetched) + " bytes fetched)");
  if (opts.publish && !pulled->artifact) {
    if (auto pub = publish_conversion(st, pulled->info, ref, pulled->manifest_digest,
                                      opts.registry);
        !pub)
      log_line(ref, "the conversion was not published (other nodes convert it too): "
                      + pub.err().message);
    else
      log_line(ref, "published its conversion as " + conversion_tag(pulled->manifest_digest));
  }
  return recorded(st, ref, pulled->info, pulled->manifest_digest);
}

} // namespace

struct image_resolver::impl {
  work_fn work;
  std::mutex m;
  std::map<std::string, std::shared_ptr<flight>> flights;
};

image_resolver::image_resolver(std::shared_ptr<layers::store> st, resolver_options opts)
    : image_resolver([st = std::move(st), opts = std::move(opts)](const image_reference& ref) {
        return resolve_here(*st, opts, ref);
      }) {}

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
  std::unique_lock<std::mutex> lock(f->m);
  if (!f->cv.wait_until(lock, deadline, [&] { return f->done; }))
    return error{errc::timeout, "image " + key + ": not resolved within "
                                  + seconds_text(std::chrono::steady_clock::now() - asked)
                                  + ", the create's timeout (its pull goes on; a later create "
                                    "finds the image once it is in)"};
  if (f->err)
    return f->err;
  return f->info;
}

} // namespace dsec::registry
