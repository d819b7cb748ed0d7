// Importing container images users already have: an OCI image layout
// directory (`skopeo copy ... oci:DIR`, `umoci`, `docker buildx --output
// type=oci`) or a `docker save` archive (classic `<id>/layer.tar` or the
// newer one with OCI blobs inside), into ONE EROFS layer of the store.
//
// One EROFS per image, not one per OCI layer:
//  - a ref names a whole environment ("base/ubuntu@22.04"), so a sandbox
//    spec stays one entry however the image was built;
//  - overlayfs stacks fewer lowers (its depth is limited, and every lower
//    costs a lookup on every miss);
//  - whiteouts and opaque dirs are resolved once, here, instead of by
//    overlayfs at every mount (OCI whiteout files are not overlay whiteouts
//    and would need converting anyway);
//  - the mount cache and its refcounts keep one entry per image per sandbox.
// The cost: images that share OCI base layers do not share EROFS blocks or
// page cache; each import stores its full tree.
//
// Every blob read is checked against the digest (and size) its parent names
// before it is used, and every path into the layout is resolved inside it
// (openat2 RESOLVE_IN_ROOT), so a crafted manifest cannot make the import
// read host files. Layers are applied in order into one staging directory
// under <store>/tmp/, which is removed on success and on failure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "layers/store.hpp"
#include "layers/tar_apply.hpp"

namespace dsec::layers {

/// One layer blob of an image, in apply order (lowest first).
struct image_layer {
  /// Path of the blob relative to the layout (or archive) root.
  std::string path;
  /// The digests the blob may have: the manifest's descriptor digest, or for
  /// `docker save` the config's diff_id and the digest in the file's name.
  std::vector<std::string> digests;
  /// Media type from the manifest; empty for `docker save` (always a tar).
  std::string media_type;
  /// Size from the descriptor; -1 when unknown.
  int64_t size = -1;
};

/// A parsed and verified image description.
struct image_manifest {
  /// "oci-layout" or "docker-archive".
  std::string format;
  /// What was used, for messages ("manifest sha256:.." or "manifest.json").
  std::string source;
  std::vector<image_layer> layers;
};

/// True for the layer media types an import applies: OCI and Docker tars,
/// plain, gzip or zstd (the one list; registry pulls check against it too).
bool is_layer_tar_media_type(std::string_view media_type);

/// Reads index.json of the OCI layout at `dir`, follows nested indexes
/// (picking linux/amd64 when there are several manifests), verifies and
/// parses the manifest and the config. Errors name the file and the fault:
/// missing index.json, manifest not found, blob missing, digest mismatch,
/// unsupported media type.
expected<image_manifest> read_oci_layout(const std::string& dir);

/// Reads manifest.json of an unpacked `docker save` archive at `dir`,
/// verifies the config against its name and collects the layers with the
/// digests they must have.
expected<image_manifest> read_docker_manifest(const std::string& dir);

/// What an import did.
struct import_result {
  layer_info info;
  image_manifest manifest;
  apply_stats stats;
};

/// Imports the OCI layout directory or `docker save` archive at `input` as
/// `name@version` of `kind`: verifies every blob, applies the layers in
/// order into one staging dir under <store>/tmp/ and builds one EROFS layer
/// with store::build (so a ref with other content is errc::conflict).
/// Blocking (seconds to minutes). Nothing of the staging dir remains after
/// return, whether it succeeded or not.
expected<import_result> import_image(store& s, const std::string& input, const std::string& name,
                                     const std::string& version, const std::string& kind);

/// import_image with build options: `opts.chunked` for a metadata image plus
/// data blob, `opts.config` for the image's exec defaults.
expected<import_result> import_image(store& s, const std::string& input, const std::string& name,
                                     const std::string& version, const std::string& kind,
                                     const store::build_options& opts);

/// The apply-and-build half of import_image for layer blobs already on disk
/// (a registry pull downloads them into `dir`, paths in `manifest` relative
/// to it): verifies each blob against its digests, applies them in order
/// into a staging dir under <store>/tmp/ and builds one layer with `opts`.
/// Nothing of the staging dir remains after return.
expected<import_result> import_layers(store& s, const std::string& dir,
                                      const image_manifest& manifest, const std::string& name,
                                      const std::string& version, const std::string& kind,
                                      const store::build_options& opts);

} // namespace dsec::layers
