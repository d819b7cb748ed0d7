// Pulling an image from a registry into the layer store: resolve the
// reference (an index picks linux/amd64), download the layers concurrently
// (each blob once, each checked against its digest; gzip, zstd or plain
// tar), apply them as `dsec layer import` does (layers/oci_import.hpp: the
// same hostile-tar protections, whiteouts resolved) and build ONE chunked
// EROFS layer (metadata image + data blob, layers/blob_device.hpp). The
// image's config (Env, WorkingDir, User) is kept as the layer's exec defaults.
//
// A dsec layer artifact (one `dsec layer push` or a conversion published,
// registry/layer_artifact.hpp) is recognised by its artifactType and stored
// as the layer it is, with the same digest, instead of converted.
//
// Nothing half-made: downloads and the staging tree live under
// <store>/tmp/ and are removed whatever happens; the catalog changes only
// when the layer is whole.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/types.hpp"
#include "core/image_reference.hpp"
#include "registry/registry_options.hpp"

namespace dsec::layers {
class store;
}

namespace dsec::registry {

struct pull_options {
  registry_options registry;
  /// Layer name and version; empty: image_layer_ref() of the manifest.
  std::string name;
  std::string version;
  /// "base" unless a layer artifact says otherwise.
  std::string kind = "base";
  /// EROFS chunk size of the data blob (and of lazy range reads).
  uint32_t chunk_size = 256u << 10;
  /// For a dsec layer artifact: fetch only the metadata image and register
  /// the data blob for on-demand reads (registry/lazy_source.hpp) instead of
  /// downloading it.
  bool lazy = false;
};

struct pull_result {
  layer_info info;
  /// The digest of the image manifest the reference resolved to (the
  /// platform manifest, not the index).
  std::string manifest_digest;
  /// True when it was a dsec layer artifact (pushed or published), not an
  /// image converted here.
  bool artifact = false;
  /// Bytes downloaded from registries by this pull, and written to the store.
  uint64_t bytes_fetched = 0;
  uint64_t bytes_written = 0;
};

/// The layer ref an image gets when no name is given:
/// "img/<registry with ':' as '-'>/<repository>@sha256-<first 32 hex of manifest digest>".
std::string image_layer_ref(const image_reference& ref, const std::string& manifest_digest);

/// Pulls `reference` into `st`. Blocking (seconds to minutes): call it from a
/// worker thread. Errors as registry_client's, plus those of the import.
expected<pull_result> pull_image(layers::store& st, const image_reference& reference,
                                 const pull_options& opts);

} // namespace dsec::registry
