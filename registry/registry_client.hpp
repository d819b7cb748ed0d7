// A client of the OCI distribution API v2 (what CNCF distribution, Harbor,
// GHCR, ECR and Docker Hub serve), over libcurl: TLS checked against the
// system CAs or --registry-ca, plain HTTP only for hosts named insecure,
// anonymous / Basic / Bearer-token auth (the WWW-Authenticate realm, service
// and scope; tokens cached per scope until they expire), mirrors tried before
// the registry for reads. Every blob read is checked against its digest; a
// ranged read is checked by the caller (it cannot be here).
//
// Errors name the registry, the repository or reference and the cause:
//   not_found         unknown repository, tag, manifest or blob (404, or 401
//                     with NAME_UNKNOWN / a scope the token lacks)
//   invalid_argument  wrong credentials ("registry HOST answered 401 ..."),
//                     a digest mismatch, a body past a limit, a manifest
//                     that does not parse
//   unavailable       connect refused, TLS failure, 5xx, connection cut
//   timeout           no progress within request_timeout
// Thread-safe: one client may be used from several threads at once (each
// call takes its own curl handle; the token cache is locked).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "registry/byteranges.hpp"
#include "registry/registry_options.hpp"

namespace dsec::registry {

/// A manifest or index as the registry served it.
struct manifest_body {
  /// The Content-Type the registry answered (the manifest's media type).
  std::string media_type;
  /// "sha256:<hex>" of body (Docker-Content-Digest is checked against it).
  std::string digest;
  std::string body;
};

/// Counters of one client, for benches, tests and /metrics.
struct transfer_stats {
  uint64_t requests = 0;
  /// Body bytes received (blobs, ranges, manifests).
  uint64_t bytes_in = 0;
  /// Body bytes sent (pushes).
  uint64_t bytes_out = 0;
  /// Range requests sent straight to a blob's storage location, past the
  /// registry (storage_locations.hpp).
  uint64_t storage_reads = 0;
};

class registry_client {
 public:
  /// A client of `registry` ("host[:port]" or "docker.io") under `opts`.
  /// Reads the credentials file once; a malformed one is invalid_argument
  /// naming it. Does not connect yet.
  static expected<std::shared_ptr<registry_client>> open(const std::string& registry,
                                                         const registry_options& opts);

  virtual ~registry_client() = default;

  // -- manifests ----------------------------------------------------------------

  /// GET /v2/<repo>/manifests/<ref> accepting OCI and Docker schema 2
  /// manifests and indexes. A by-digest ref is verified against the body.
  virtual expected<manifest_body> get_manifest(const std::string& repo,
                                               const std::string& ref) = 0;

  /// HEAD of the same: the digest, or not_found.
  virtual expected<std::string> head_manifest(const std::string& repo, const std::string& ref) = 0;

  /// PUT /v2/<repo>/manifests/<ref> (a tag or the body's digest); returns the
  /// digest the registry stored it under.
  virtual expected<std::string> put_manifest(const std::string& repo, const std::string& ref,
                                             const std::string& media_type,
                                             const std::string& body) = 0;

  /// GET /v2/<repo>/referrers/<digest>[?artifactType=..]: the index body, or
  /// not_found when the registry lacks the referrers API (distribution 2.8).
  virtual expected<std::string> get_referrers(const std::string& repo, const std::string& digest,
                                              const std::string& artifact_type) = 0;

  // -- blobs --------------------------------------------------------------------

  /// Downloads blob `digest` into `path` (created, truncated), checking its
  /// sha256 and, when size >= 0, its size; on any failure `path` is removed.
  /// `progress` (may be empty) is called with bytes written so far.
  virtual status get_blob_to_file(const std::string& repo, const std::string& digest,
                                  int64_t size, const std::string& path,
                                  const std::function<void(uint64_t)>& progress = {}) = 0;

  /// A small blob (config, an EROFS metadata image) in memory, at most
  /// `max_bytes`, checked against `digest`.
  virtual expected<std::string> get_blob(const std::string& repo, const std::string& digest,
                                         size_t max_bytes) = 0;

  /// Bytes [offset, offset+len) of blob `digest` by an HTTP Range request
  /// (following the registry's redirect to storage, whose final URL later
  /// ranges of the blob use directly for a while: storage_locations.hpp).
  /// Shorter only at the end
  /// of the blob. Not verified here: the caller checks chunk digests.
  virtual expected<std::string> get_blob_range(const std::string& repo, const std::string& digest,
                                               uint64_t offset, uint32_t len) = 0;

  /// Several ranges of blob `digest` (sorted, disjoint, each non-empty) in
  /// ONE request, answered as multipart/byteranges (registry/byteranges.hpp):
  /// the bytes of each, in order, as get_blob_range gives them. A registry
  /// (or its storage) that answers otherwise gives invalid_argument, and
  /// too_large if it sends more than the ranges (a whole blob): the caller
  /// then asks for them one by one.
  virtual expected<std::vector<std::string>> get_blob_ranges(
    const std::string& repo, const std::string& digest,
    const std::vector<byte_range>& ranges) = 0;

  /// HEAD /v2/<repo>/blobs/<digest>: true if the registry has it.
  virtual expected<bool> has_blob(const std::string& repo, const std::string& digest) = 0;

  /// Uploads the file at `path` as blob `digest` (POST then one PUT), unless
  /// has_blob says it is there already.
  virtual status push_blob_file(const std::string& repo, const std::string& digest,
                                const std::string& path) = 0;

  /// Uploads `data` as blob `digest` (small blobs: configs, manifests' parts).
  virtual status push_blob(const std::string& repo, const std::string& digest,
                           const std::string& data) = 0;

  // -- observers ------------------------------------------------------------------

  [[nodiscard]] virtual transfer_stats stats() const = 0;
  /// "host[:port]" as given to open().
  [[nodiscard]] virtual const std::string& registry() const = 0;
};

} // namespace dsec::registry
