// A layer as an OCI artifact: how `dsec layer push` stores any layer
// (snapshots included) in a registry, and how the first node that converts an
// image publishes the result so no other node converts it again.
//
//   manifest   application/vnd.oci.image.manifest.v1+json,
//              artifactType application/vnd.dsec.layer.v1
//   config     application/vnd.dsec.layer.config.v1+json: the layer's
//              name, version, kind, digest and exec defaults
//   layers[0]  application/vnd.dsec.erofs.v1: the EROFS image (for a
//              chunked layer, only the metadata: inodes and chunk indexes)
//   layers[1]  application/vnd.dsec.erofs.data.v1: the data blob (chunked
//              layers only), read a chunk at a time by range requests
//   subject    for a published conversion: the source image's manifest
//
// A conversion is published in the source image's repository. It is found
// with the referrers API where the registry has it, else through the tag
// `sha256-<source manifest hex>.dsec` (distribution 2.8, what Debian ships,
// has no referrers API), which is always written too.
#pragma once

#include <string>

#include "core/error.hpp"
#include "core/types.hpp"
#include "core/image_reference.hpp"
#include "registry/registry_options.hpp"

namespace dsec::layers {
class store;
}

namespace dsec::registry {

constexpr const char* layer_artifact_type = "application/vnd.dsec.layer.v1";
constexpr const char* layer_config_media_type = "application/vnd.dsec.layer.config.v1+json";
constexpr const char* erofs_media_type = "application/vnd.dsec.erofs.v1";
constexpr const char* erofs_data_media_type = "application/vnd.dsec.erofs.data.v1";

/// The tag a conversion of the image with manifest `source_digest` is
/// published under: "sha256-<hex>.dsec".
std::string conversion_tag(const std::string& source_digest);

/// Pushes layer `layer_ref` of `st` to `target` (which must carry a tag):
/// its blobs (skipping those the registry has), its config, then the
/// manifest. Returns the manifest digest. Blocking.
expected<std::string> push_layer(const layers::store& st, const std::string& layer_ref,
                                 const image_reference& target, const registry_options& opts);

/// Publishes `info` (a layer of `st` converted from `source`, whose platform
/// manifest is `source_digest`) as a conversion: push_layer with `subject`
/// set, under conversion_tag(source_digest) in source's repository.
status publish_conversion(const layers::store& st, const layer_info& info,
                          const image_reference& source, const std::string& source_digest,
                          const registry_options& opts);

/// Stores the dsec layer artifact whose manifest body `manifest` was read
/// from `ref` (what `dsec layer pull` of a pushed layer and fetch_conversion
/// do): its config and metadata image fetched and verified, the data blob
/// registered for on-demand reads (lazy) or downloaded, then the layer
/// committed under the name and version it was pushed with (same digest).
/// invalid_argument if the manifest is not a dsec layer. Blocking.
expected<layer_info> fetch_layer_artifact(layers::store& st, const image_reference& ref,
                                          const std::string& manifest,
                                          const registry_options& opts, bool lazy);

/// Looks for a published conversion of `source_digest`; not_found if none.
/// On success the layer is in `st`: its metadata image fetched and verified,
/// its data blob registered for on-demand reads (lazy) or downloaded.
expected<layer_info> fetch_conversion(layers::store& st, const image_reference& source,
                                      const std::string& source_digest,
                                      const registry_options& opts, bool lazy);

} // namespace dsec::registry
