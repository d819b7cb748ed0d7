// The grammar of an image reference, as docker and the distribution spec
// write it: `[REGISTRY/]REPOSITORY[:TAG][@sha256:HEX]`. The one parser of that
// input: the CLI (`dsec layer pull`, `--image`), spec validation (`"image"`)
// and E2B's templateID all call it. Pure and standard-library only; in core/
// beside layer_ref.hpp so request validation (core/validate.cpp) can call it.
//
//   registry    a host with a '.' or ':' or "localhost", optionally :port,
//               IPv6 in brackets; absent: docker.io ("registry-1.docker.io"
//               on the wire), where a one-part repository gets "library/"
//   repository  lower-case path components [a-z0-9]+([._-]|__)[a-z0-9]+ joined
//               by '/', at most 255 characters
//   tag         [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; absent and no digest: latest
//   digest      sha256:<64 lower-case hex>
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dsec::registry {

/// A parsed image reference.
struct image_reference {
  /// "host[:port]" as written; "docker.io" when none was.
  std::string registry;
  /// "library/python", "team/swe-django".
  std::string repository;
  /// Empty when only a digest was given.
  std::string tag;
  /// "sha256:<hex>" or empty.
  std::string digest;

  /// The host requests go to: registry, except docker.io ->
  /// registry-1.docker.io.
  [[nodiscard]] std::string api_host() const;

  /// What a manifest request names: the digest if any, else the tag.
  [[nodiscard]] std::string manifest_ref() const { return digest.empty() ? tag : digest; }

  /// The canonical spelling: registry/repository[:tag][@digest].
  [[nodiscard]] std::string str() const;
};

/// Parses `text`; invalid_argument names the part that is wrong.
expected<image_reference> parse_image_reference(std::string_view text);

/// True when `text` can only be an image reference, never a layer ref
/// (`name@version`), an alias or a sandbox id: it has a registry part (a
/// first component with '.', ':' or "localhost") or a ':' tag or an
/// '@sha256:' digest. E2B's templateID and REST specs use it to tell them apart.
bool looks_like_image_reference(std::string_view text);

} // namespace dsec::registry
