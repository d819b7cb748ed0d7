// Pulling an image into the layer store (see image_pull.hpp), as a checklist:
// resolve the reference to one platform manifest, recognise a dsec layer
// artifact, check the layer types, fetch the config, download the distinct
// layer blobs concurrently into <store>/tmp/pull-*/ (each verified against
// its digest by the client), apply and build one chunked layer
// (layers/oci_import.hpp), record the reference in images.json.
#include "registry/image_pull.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <thread>

#include "core/layer_ref.hpp"
#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/oci_import.hpp"
#include "layers/store.hpp"
#include "registry/image_index.hpp"
#include "registry/image_pull_artifact.hpp"
#include "registry/manifest.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

/// Bound on an image config blob (Docker's are a few KiB; history can grow).
constexpr size_t max_config_bytes = 4u << 20;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct resolved {
  oci_manifest manifest;
  std::string digest;
};

/// The reference's manifest; an index is followed to its linux/amd64 entry.
expected<resolved> resolve(registry_client& client, const image_reference& ref,
                           const registry_options& opts) {
  manifest_limits limits;
  limits.max_layers = opts.max_layers;
  limits.max_image_bytes = opts.max_image_bytes;
  auto what = ref.str();
  auto body = client.get_manifest(ref.repository, ref.manifest_ref());
  if (!body)
    return body.err();
  auto kind = classify_manifest(body->media_type, body->body, what);
  if (!kind)
    return kind.err();
  if (*kind == "index") {
    auto index = parse_index(body->body, what, limits);
    if (!index)
      return index.err();
    auto entry = pick_platform(*index, what);
    if (!entry)
      return entry.err();
    what = ref.registry + "/" + ref.repository + "@" + entry->digest;
    body = client.get_manifest(ref.repository, entry->digest);
    if (!body)
      return body.err();
    kind = classify_manifest(body->media_type, body->body, what);
    if (!kind)
      return kind.err();
    if (*kind != "manifest")
      return invalid_argument("index " + ref.str() + ": its linux/amd64 entry is another index");
  }
  auto m = parse_manifest(body->body, what, limits);
  if (!m)
    return m.err();
  return resolved{std::move(*m), body->digest};
}

/// Downloads each distinct blob of `blobs` into `dir`/blobs/sha256/<hex>,
/// at most `max_concurrent` at once; the first error stops new downloads.
status download_blobs(registry_client& client, const std::string& repo,
                      const std::vector<descriptor>& blobs, const std::string& dir,
                      int max_concurrent) {
  if (auto s = sys::make_dirs(dir + "/blobs/sha256", 0700); !s)
    return s;
  std::vector<const descriptor*> todo;
  std::set<std::string> seen;
  for (const auto& b : blobs)
    if (seen.insert(b.digest).second)
      todo.push_back(&b);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  error first;
  auto worker = [&] {
    for (;;) {
      size_t i = next++;
      if (i >= todo.size() || failed.load())
        return;
      const auto& d = *todo[i];
      auto path = dir + "/blobs/sha256/" + layers::digest_hex(d.digest);
      if (auto s = client.get_blob_to_file(repo, d.digest, d.size, path); !s) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed.exchange(true))
          first = s.err();
        return;
      }
    }
  };
  size_t n = std::min<size_t>(todo.size(), static_cast<size_t>(std::max(1, max_concurrent)));
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i)
    threads.emplace_back(worker);
  worker();
  for (auto& t : threads)
    t.join();
  if (failed)
    return first;
  return {};
}

/// Bytes the layer occupies in the store: its image plus its data blob.
uint64_t stored_bytes(const layers::store& st, const layer_info& info) {
  uint64_t total = static_cast<uint64_t>(info.size_bytes);
  auto image = st.blob_path(info.digest);
  if (auto ref = layers::read_data_blob_ref(image); ref && !ref->digest.empty()) {
    struct stat sb {};
    if (::stat(layers::data_blob_path(image, ref->digest).c_str(), &sb) == 0)
      total += static_cast<uint64_t>(sb.st_size);
  }
  return total;
}

} // namespace

std::string image_layer_ref(const image_reference& ref, const std::string& manifest_digest) {
  std::string reg;
  for (char c : ref.registry) {
    char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '-';
    if (c == '[' || c == ']')
      continue;
    reg += ok ? l : '-';
  }
  return "img/" + reg + "/" + ref.repository + "@sha256-" +
         layers::digest_hex(manifest_digest).substr(0, 32);
}

expected<pull_result> pull_image(layers::store& st, const image_reference& reference,
                                 const pull_options& opts) {
  auto what = "pull " + reference.str();
  auto fail = [&](const error& e) { return error{e.code, what + ": " + e.message}; };
  if (opts.name.empty() != opts.version.empty())
    return invalid_argument(what + ": give both a name and a version, or neither");
  if (!opts.kind.empty())
    if (auto s = layers::validate_kind(opts.kind); !s)
      return fail(s.err());
  auto client = registry_client::open(reference.registry, opts.registry);
  if (!client)
    return fail(client.err());
  auto r = resolve(**client, reference, opts.registry);
  if (!r)
    return fail(r.err());
  auto fetched = [&] { return (*client)->stats().bytes_in; };

  pull_result out;
  if (is_layer_artifact(r->manifest)) {
    auto a = pull_layer_artifact(st, **client, reference, r->manifest, r->digest, opts);
    if (!a)
      return fail(a.err());
    out = std::move(*a);
  } else {
    std::string name = opts.name, version = opts.version;
    if (name.empty()) {
      auto ref = image_layer_ref(reference, r->digest);
      auto at = ref.rfind('@');
      name = ref.substr(0, at);
      version = ref.substr(at + 1);
    }
    std::string kind = opts.kind.empty() ? "base" : opts.kind;
    for (auto s : {layers::validate_name(name), layers::validate_version(version)})
      if (!s)
        return fail(s.err());
    for (size_t i = 0; i < r->manifest.layers.size(); ++i)
      if (!is_layer_tar_type(r->manifest.layers[i].media_type))
        return fail(invalid_argument("layer " + std::to_string(i + 1) + " (" +
                                     r->manifest.layers[i].digest + ") has media type \"" +
                                     r->manifest.layers[i].media_type +
                                     "\", not a tar, tar+gzip or tar+zstd image layer"));
    if (r->manifest.layers.empty())
      return fail(invalid_argument("the image has no layers"));
    auto existing = st.resolve(name + "@" + version);
    if (existing && opts.name.empty()) {
      // The default ref names the manifest digest: this image is here already.
      out.info = *existing;
    } else {
      auto cfg = (*client)->get_blob(reference.repository, r->manifest.config.digest,
                                     max_config_bytes);
      if (!cfg)
        return fail(cfg.err());
      auto exec = parse_image_config(*cfg, r->manifest.config.digest);
      if (!exec)
        return fail(exec.err());
      sys::scoped_tree staging;
      std::string tmpl = st.root() + "/tmp/pull-XXXXXX";
      if (!::mkdtemp(tmpl.data()))
        return fail(sys_error("create staging dir", tmpl, errno));
      staging.path = tmpl;
      if (auto s = download_blobs(**client, reference.repository, r->manifest.layers,
                                  staging.path, opts.registry.max_concurrent_blobs);
          !s)
        return fail(s.err());
      layers::image_manifest im;
      im.format = "registry";
      im.source = reference.str() + " (manifest " + r->digest + ")";
      for (const auto& l : r->manifest.layers)
        im.layers.push_back({"blobs/sha256/" + layers::digest_hex(l.digest), {l.digest},
                             l.media_type, l.size});
      layers::store::build_options bo;
      bo.chunked = true;
      bo.chunk_size = opts.chunk_size;
      bo.config = std::move(*exec);
      auto imported = layers::import_layers(st, staging.path, im, name, version, kind, bo);
      if (!imported)
        return fail(imported.err());
      out.info = imported->info;
      out.bytes_written = stored_bytes(st, out.info);
    }
    out.manifest_digest = r->digest;
  }
  out.bytes_fetched = fetched();
  if (auto s = record_image(st, reference.str(), {out.info.ref, out.manifest_digest, now_ms()});
      !s)
    return fail(s.err());
  return out;
}

} // namespace dsec::registry
