// How a node or the CLI reaches registries: credentials, trust, plain-HTTP
// hosts, mirrors and bounds. Filled from the command line (`--registry-auth`,
// `--registry-ca`, `--insecure-registry`, `--registry-mirror`), shared by the
// registry client, image pulls, pushes and the lazy blob daemon.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dsec::registry {

struct registry_options {
  /// A docker-style config.json ("auths": {host: {"auth": base64(user:pass)}}
  /// or "username"/"password"). Empty: $DOCKER_CONFIG/config.json, else
  /// ~/.docker/config.json, else anonymous.
  std::string auth_file;
  /// A PEM bundle trusted in addition to the system CAs; empty: system only.
  std::string ca_file;
  /// Hosts ("host:port" as in references) spoken to over plain HTTP. Every
  /// other host is HTTPS with certificate and name checks.
  std::vector<std::string> insecure_hosts;
  /// Registry host -> mirror hosts tried first, in order (for pulls and
  /// range reads; pushes always go to the registry itself). A mirror that
  /// fails or lacks the content falls through to the next, then the registry.
  std::map<std::string, std::vector<std::string>> mirrors;
  /// Blobs downloaded (or uploaded) at once by one pull (or push).
  int max_concurrent_blobs = 4;
  /// Bound on one request without progress (connect, headers, a stalled body).
  std::chrono::milliseconds request_timeout{30000};
  /// Sanity limits: a manifest or index body, the layers of one image, the
  /// sum of an image's compressed layers.
  size_t max_manifest_bytes = 4u << 20;
  size_t max_layers = 256;
  uint64_t max_image_bytes = 64ull << 30;
};

/// Parses one `--registry-mirror REGISTRY=MIRROR[,MIRROR...]` value into
/// `opts.mirrors`; invalid_argument names the malformed part.
status add_mirror_option(registry_options& opts, std::string_view value);

/// True when `host` is in opts.insecure_hosts.
bool is_insecure(const registry_options& opts, std::string_view host);

} // namespace dsec::registry
