// Saved file extents of lazy data blobs (see blob_extents.hpp).
#include "registry/blob_extents.hpp"

#include "layers/digest.hpp"
#include "registry/lazy_source.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

std::string blob_extents_path(const std::string& store_root, const std::string& digest) {
  auto hex = layers::digest_hex(digest);
  return hex.empty() ? std::string{}
                     : lazy_sources_dir(store_root) + "/sha256-" + hex + ".extents";
}

status save_blob_extents(const std::string& store_root, const std::string& digest,
                         const std::vector<layers::blob_extent>& extents) {
  auto path = blob_extents_path(store_root, digest);
  if (path.empty())
    return invalid_argument("save blob extents: \"" + digest + "\" is not sha256:<64 hex>");
  if (auto st = sys::make_dirs(lazy_sources_dir(store_root), 0755); !st)
    return st;
  return sys::write_file_atomic(path, layers::encode_blob_extents(extents));
}

expected<std::vector<layers::blob_extent>> load_blob_extents(const std::string& store_root,
                                                             const std::string& digest) {
  auto path = blob_extents_path(store_root, digest);
  if (path.empty())
    return invalid_argument("load blob extents: \"" + digest + "\" is not sha256:<64 hex>");
  if (!sys::exists(path))
    return not_found("no blob extents for " + digest + " (" + path + ")");
  auto data = sys::read_file(path);
  if (!data)
    return data.err();
  auto out = layers::decode_blob_extents(*data);
  if (!out)
    return error{out.err().code, path + ": " + out.err().message};
  return out;
}

} // namespace dsec::registry
