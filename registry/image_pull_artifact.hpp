// The pull of a dsec layer artifact (registry/layer_artifact.hpp): its EROFS
// image and data blob downloaded whole and committed through the store's
// transfer path, so the layer keeps the digest it was pushed with. Private to
// image_pull.cpp.
#pragma once

#include <string>

#include "core/error.hpp"
#include "core/image_reference.hpp"
#include "registry/image_pull.hpp"
#include "registry/manifest.hpp"

namespace dsec::layers {
class store;
}

namespace dsec::registry {

class registry_client;

/// True when `m` is a dsec layer artifact (by artifactType or config type).
bool is_layer_artifact(const oci_manifest& m);

/// Downloads and commits the artifact `m` (manifest `manifest_digest`) of
/// `ref`. Name, version and kind come from its config unless `opts` gives them.
expected<pull_result> pull_layer_artifact(layers::store& st, registry_client& client,
                                          const image_reference& ref, const oci_manifest& m,
                                          const std::string& manifest_digest,
                                          const pull_options& opts);

} // namespace dsec::registry
