// The work of one image on this node (registry/image_resolver.hpp), in
// order: images.json (a node that has the image asks no registry); the
// platform manifest the reference names now (one GET; an index picks
// linux/amd64) and a layer already converted from it under another tag; a
// conversion another node published (fetch_conversion: metadata only when
// lazy, else the data blob too); else a full pull and convert here, then publish it for the others
// (a failure to publish, such as a read-only account, is logged, not fatal).
// Every way ends in images.json, so the next create finds it there.
#include "registry/image_resolver.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "core/clock.hpp"
#include "layers/store.hpp"
#include "registry/image_index.hpp"
#include "registry/image_pull.hpp"
#include "registry/layer_artifact.hpp"
#include "registry/manifest.hpp"
#include "registry/registry_client.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

std::string seconds_text(std::chrono::steady_clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(ms) / 1000);
  return text;
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
  // Converted by another node already: its metadata image (and, unless the
  // lazy blob daemon serves it, its data blob) instead of a conversion here.
  auto conv = fetch_conversion(st, ref, *digest, opts.registry, opts.lazy);
  if (conv) {
    log_line(ref, "using the conversion published for " + *digest + " (" + conv->ref + ")");
    return recorded(st, ref, *conv, *digest);
  }
  if (conv.err().code != errc::not_found)
    log_line(ref, "the published conversion could not be used, converting here: "
                    + conv.err().message);
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

image_resolver::image_resolver(std::shared_ptr<layers::store> st, resolver_options opts)
    : image_resolver([st = std::move(st), opts = std::move(opts)](const image_reference& ref) {
        return resolve_here(*st, opts, ref);
      }) {}

} // namespace dsec::registry
