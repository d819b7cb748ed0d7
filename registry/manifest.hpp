// The documents a registry serves, parsed and bounded: OCI and Docker schema
// 2 image manifests and indexes (manifest lists), with artifactType, subject
// and annotations; the platform pick from an index (linux/amd64); the image
// config's exec defaults. Schema 1 manifests are refused with a message.
// Pure: text in, values out, unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::registry {

constexpr const char* oci_manifest_type = "application/vnd.oci.image.manifest.v1+json";
constexpr const char* oci_index_type = "application/vnd.oci.image.index.v1+json";
constexpr const char* docker_manifest_type = "application/vnd.docker.distribution.manifest.v2+json";
constexpr const char* docker_list_type = "application/vnd.docker.distribution.manifest.list.v2+json";

/// The Accept header of a manifest request: every type parsed here.
std::string manifest_accept_header();

struct platform {
  std::string os;
  std::string architecture;
  std::string variant;

  /// "linux/arm64/v8" (variant only when set).
  [[nodiscard]] std::string str() const;
};

/// An OCI content descriptor.
struct descriptor {
  std::string media_type;
  std::string digest;
  int64_t size = -1;
  std::string artifact_type;
  std::map<std::string, std::string> annotations;
  std::optional<platform> plat;
};

/// An image manifest (OCI or Docker schema 2).
struct oci_manifest {
  std::string media_type;
  std::string artifact_type;
  descriptor config;
  std::vector<descriptor> layers;
  std::optional<descriptor> subject;
  std::map<std::string, std::string> annotations;
};

/// An image index or Docker manifest list.
struct oci_index {
  std::string media_type;
  std::vector<descriptor> manifests;
  std::map<std::string, std::string> annotations;
};

/// Bounds a parse applies (registry_options carries the same numbers).
struct manifest_limits {
  size_t max_layers = 256;
  uint64_t max_image_bytes = 64ull << 30;
  /// Entries of an index.
  size_t max_manifests = 1024;
};

/// True for the index / manifest-list media types.
bool is_index_type(std::string_view media_type);

/// What `body` is, from `content_type` (the registry's Content-Type) or,
/// when that is missing or generic, the body's own mediaType field:
/// "index", "manifest"; invalid_argument for schema 1 (with a message saying
/// to push the image again with a current client) and unknown types. `what`
/// names the document in messages ("127.0.0.1:5000/x:1").
expected<std::string> classify_manifest(std::string_view content_type, std::string_view body,
                                        const std::string& what);

/// Parses an image manifest; checks digests, sizes, the layer count and the
/// sum of layer sizes against `limits` (too_large names the limit).
expected<oci_manifest> parse_manifest(std::string_view body, const std::string& what,
                                      const manifest_limits& limits = {});

/// Parses an index / manifest list.
expected<oci_index> parse_index(std::string_view body, const std::string& what,
                                const manifest_limits& limits = {});

/// The entry of `index` for os/architecture (variant ignored unless given);
/// not_found lists the platforms the index has ("has linux/arm64, linux/s390x").
expected<descriptor> pick_platform(const oci_index& index, const std::string& what,
                                   const std::string& os = "linux",
                                   const std::string& architecture = "amd64");

/// The exec defaults of an image config blob (config.Env as a map,
/// WorkingDir, User); invalid_argument for a config that is not JSON.
expected<layer_config> parse_image_config(std::string_view body, const std::string& what);

/// True for the layer media types import can apply (tar, tar+gzip,
/// tar+zstd in OCI and Docker spellings).
bool is_layer_tar_type(std::string_view media_type);

} // namespace dsec::registry
