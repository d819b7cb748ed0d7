// Lazy blob sources (see lazy_source.hpp): one JSON file per data blob that
// stays in a registry, and the blobs/ symlink into the lazy blob daemon's
// mount that the mount cache follows.
#include "registry/lazy_source.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "layers/digest.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

namespace {

using json = nlohmann::json;

std::string source_path(const std::string& store_root, const std::string& hex) {
  return lazy_sources_dir(store_root) + "/sha256-" + hex + ".json";
}

} // namespace

std::string lazy_sources_dir(const std::string& store_root) {
  return store_root + "/lazy/sources";
}

std::string lazy_mount_dir(const std::string& store_root) {
  return store_root + "/lazy/mnt";
}

status register_blob_source(const std::string& store_root, const blob_source& src) {
  auto hex = layers::digest_hex(src.digest);
  auto what = "register lazy blob " + src.digest;
  if (hex.empty())
    return invalid_argument(what + ": not sha256:<64 hex>");
  if (src.registry.empty() || src.repository.empty())
    return invalid_argument(what + ": the source needs a registry and a repository");
  if (src.chunk_size < 4096 || (src.chunk_size & (src.chunk_size - 1)) != 0)
    return invalid_argument(what + ": chunk size " + std::to_string(src.chunk_size)
                            + " is not a power of two >= 4096");
  for (auto& d : {lazy_sources_dir(store_root), lazy_mount_dir(store_root), store_root + "/blobs"})
    if (auto st = sys::make_dirs(d, 0755); !st)
      return error{st.err().code, what + ": " + st.err().message};
  json j = {{"registry", src.registry}, {"repository", src.repository}, {"digest", src.digest},
            {"size", src.size}, {"chunk_size", src.chunk_size}};
  if (auto st = sys::write_file_atomic(source_path(store_root, hex), j.dump() + "\n"); !st)
    return error{st.err().code, what + ": " + st.err().message};
  // blobs/sha256-<hex>.blob -> ../lazy/mnt/sha256-<hex>.blob, unless the
  // whole blob is here already (then reads never leave the node).
  auto link = store_root + "/blobs/sha256-" + hex + ".blob";
  auto target = "../lazy/mnt/sha256-" + hex + ".blob";
  struct stat st;
  if (::lstat(link.c_str(), &st) == 0)
    return {};
  auto tmp = link + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    return sys_error(what + ": symlink", tmp, errno);
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error(what + ": rename", link, err);
  }
  return {};
}

expected<blob_source> read_blob_source(const std::string& store_root, const std::string& digest) {
  auto hex = layers::digest_hex(digest);
  if (hex.empty())
    return invalid_argument("lazy blob \"" + digest + "\": not sha256:<64 hex>");
  auto path = source_path(store_root, hex);
  if (!sys::exists(path))
    return not_found("lazy blob " + digest + ": no source registered (" + path + ")");
  auto text = sys::read_file(path);
  if (!text)
    return text.err();
  auto j = json::parse(*text, nullptr, false);
  blob_source src;
  if (j.is_discarded() || !j.is_object() || !j.contains("registry") || !j["registry"].is_string()
      || !j.contains("repository") || !j["repository"].is_string() || !j.contains("digest")
      || !j["digest"].is_string() || !j.contains("size") || !j["size"].is_number_unsigned())
    return invalid_argument("lazy blob source " + path + ": not {registry, repository, digest, "
                            "size, chunk_size}");
  src.registry = j["registry"].get<std::string>();
  src.repository = j["repository"].get<std::string>();
  src.digest = j["digest"].get<std::string>();
  src.size = j["size"].get<uint64_t>();
  if (j.contains("chunk_size") && j["chunk_size"].is_number_unsigned())
    src.chunk_size = j["chunk_size"].get<uint32_t>();
  if (src.digest != digest)
    return invalid_argument("lazy blob source " + path + " names " + src.digest);
  if (src.chunk_size < 4096 || (src.chunk_size & (src.chunk_size - 1)) != 0)
    return invalid_argument("lazy blob source " + path + ": chunk size "
                            + std::to_string(src.chunk_size) + " is not a power of two >= 4096");
  return src;
}

} // namespace dsec::registry
