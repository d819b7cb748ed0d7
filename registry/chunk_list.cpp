// Chunk digest lists (see chunk_list.hpp).
#include "registry/chunk_list.hpp"

#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>

#include "layers/digest.hpp"
#include "registry/lazy_source.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::registry {

expected<std::string> make_chunk_list(const std::string& blob_path, uint32_t chunk_size) {
  if (chunk_size < 4096 || (chunk_size & (chunk_size - 1)) != 0)
    return invalid_argument("chunk list of " + blob_path + ": chunk size "
                            + std::to_string(chunk_size) + " is not a power of two >= 4096");
  sys::unique_fd fd{::open(blob_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("chunk list: open", blob_path, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  std::string out;
  std::string buf(chunk_size, '\0');
  for (;;) {
    size_t got = 0;
    while (got < chunk_size) {
      auto n = ::read(fd.get(), buf.data() + got, chunk_size - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return sys_error("chunk list: read", blob_path, errno);
      if (n == 0)
        break;
      got += size_t(n);
    }
    if (got == 0)
      break;
    unsigned char md[SHA256_DIGEST_LENGTH];
    ::SHA256(reinterpret_cast<const unsigned char*>(buf.data()), got, md);
    out.append(reinterpret_cast<const char*>(md), sizeof md);
    if (got < chunk_size)
      break;
  }
  return out;
}

std::string chunk_list_path(const std::string& store_root, const std::string& digest) {
  auto hex = layers::digest_hex(digest);
  return hex.empty() ? std::string{} : lazy_sources_dir(store_root) + "/sha256-" + hex + ".chunks";
}

status save_chunk_list(const std::string& store_root, const std::string& digest,
                       const std::string& list) {
  auto path = chunk_list_path(store_root, digest);
  if (path.empty())
    return invalid_argument("save chunk list: \"" + digest + "\" is not sha256:<64 hex>");
  if (list.size() % 32 != 0)
    return invalid_argument("save chunk list of " + digest + ": " + std::to_string(list.size())
                            + " bytes is not a whole number of sha256 digests");
  if (auto st = sys::make_dirs(lazy_sources_dir(store_root), 0755); !st)
    return st;
  return sys::write_file_atomic(path, list);
}

expected<std::string> load_chunk_list(const std::string& store_root, const std::string& digest) {
  auto path = chunk_list_path(store_root, digest);
  if (path.empty())
    return invalid_argument("load chunk list: \"" + digest + "\" is not sha256:<64 hex>");
  if (!sys::exists(path))
    return not_found("no chunk list for " + digest + " (" + path + ")");
  auto data = sys::read_file(path);
  if (data && data->size() % 32 != 0)
    return invalid_argument("chunk list " + path + " is " + std::to_string(data->size())
                            + " bytes, not a whole number of sha256 digests");
  return data;
}

std::string chunk_digest_hex(const std::string& list, uint64_t index) {
  if ((index + 1) * 32 > list.size())
    return {};
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (size_t i = index * 32; i < (index + 1) * 32; ++i) {
    auto b = static_cast<unsigned char>(list[i]);
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

} // namespace dsec::registry
