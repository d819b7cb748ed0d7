// sha256 digests via libcrypto EVP. One EVP_MD_CTX per call: the functions are
// thread-safe and hold no global state.
#include "layers/digest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "sys/fd.hpp"

namespace dsec::layers {

namespace {

constexpr std::string_view prefix = "sha256:";

struct md_ctx_deleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, md_ctx_deleter>;

std::string to_hex(const unsigned char* data, unsigned int len) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(prefix.size() + 2 * len);
  out.append(prefix);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 0xf]);
  }
  return out;
}

md_ctx_ptr new_sha256_ctx() {
  md_ctx_ptr ctx{EVP_MD_CTX_new()};
  if (ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    ctx.reset();
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  return to_hex(md, len);
}

} // namespace

std::string sha256_string(std::string_view data) {
  auto ctx = new_sha256_ctx();
  // EVP only fails to allocate or initialise sha256 when libcrypto itself is
  // broken; there is no caller that could recover from that.
  if (!ctx)
    std::abort();
  EVP_DigestUpdate(ctx.get(), data.data(), data.size());
  return finish(ctx.get());
}

expected<std::string> sha256_file(const std::string& path) {
  sys::unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("digest: open", path, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  auto ctx = new_sha256_ctx();
  if (!ctx)
    return internal_error("digest " + path + ": cannot initialise sha256 in libcrypto");
  std::vector<char> buf(1 << 20);
  for (;;) {
    auto n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return sys_error("digest: read", path, errno);
    }
    if (n == 0)
      break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
  }
  return finish(ctx.get());
}

bool is_valid_digest(std::string_view digest) {
  if (digest.size() != prefix.size() + 64 || digest.substr(0, prefix.size()) != prefix)
    return false;
  for (char c : digest.substr(prefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

std::string digest_hex(std::string_view digest) {
  if (!is_valid_digest(digest))
    return {};
  return std::string{digest.substr(prefix.size())};
}

} // namespace dsec::layers
