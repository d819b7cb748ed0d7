// The store side of layer transfers between peers (see transfer.hpp): plain
// file work over the store, no actors, no network.
#include "layers/transfer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "layers/blob_cache.hpp"
#include "layers/blob_device.hpp"
#include "layers/digest.hpp"
#include "layers/store.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::layers {

expected<layer_info> resolve_held(const store& st, const std::string& ref,
                                  const std::string& node_id) {
  auto info = st.resolve(ref);
  if (!info)
    return info;
  if (!layer_present(st, info->digest))
    return not_found("layer " + ref + ": node " + node_id + " knows it but does not hold its image");
  return info;
}

namespace {

/// Where image or data blob `digest` lives in `st` ("" if neither exists).
std::string stored_path(const store& st, const std::string& digest) {
  auto image = st.blob_path(digest);
  if (image.empty() || sys::exists(image))
    return image;
  auto data = data_blob_path(image, digest);
  return sys::exists(data) ? data : image;
}

} // namespace

expected<committed_image> commit_fetched_image(store& st, const std::string& tmp,
                                               const layer_info& info) {
  auto out = st.add_blob(tmp, info); // verifies size and digest, or deletes tmp
  if (!out)
    return out.err();
  committed_image done;
  done.info = *out;
  auto image = st.blob_path(out->digest);
  auto ref = read_data_blob_ref(image);
  if (!ref)
    return error{ref.err().code, "fetched layer " + info.ref + ": " + ref.err().message};
  if (!ref->digest.empty() && !sys::exists(data_blob_path(image, ref->digest))) {
    done.data_digest = ref->digest;
    done.data_max = ref->blocks * ref->block_size;
    done.slack = ref->block_size > 0 ? ref->block_size - 1 : 0;
  }
  return done;
}

expected<bool> commit_fetched_data_blob(store& st, const std::string& tmp,
                                        const layer_info& info, const std::string& digest) {
  auto what = "fetched layer " + info.ref + ": data blob";
  auto got = sha256_file(tmp);
  if (!got || *got != digest) {
    ::unlink(tmp.c_str());
    return internal_error(what + (got ? " digest mismatch: it is " + *got + ", the image names "
                                          + digest + " (corrupt copy)"
                                      : ": " + got.err().message));
  }
  auto final_path = data_blob_path(st.blob_path(info.digest), digest);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    auto err = errno;
    ::unlink(tmp.c_str());
    return sys_error(what + ": rename", tmp + " -> " + final_path, err);
  }
  sys::unique_fd dir{::open((st.root() + "/blobs").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir)
    (void)::fsync(dir.get());
  return true;
}

expected<std::string> read_image_chunk(const store& st, const std::string& digest,
                                       uint64_t offset, uint32_t len) {
  auto path = stored_path(st, digest);
  if (path.empty())
    return invalid_argument("read layer image: bad digest \"" + digest.substr(0, 80) + "\"");
  sys::unique_fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("read layer image", path, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  std::string out(std::min(len, max_chunk_bytes), '\0');
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::pread(fd.get(), out.data() + got, out.size() - got,
                     static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return sys_error("read layer image", path, errno);
    if (n == 0)
      break; // end of the image
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

std::vector<member_info> fetch_candidates(const std::vector<member_info>& view,
                                          const std::string& self_id, const std::string& ref) {
  std::vector<member_info> out;
  for (auto& m : view)
    if (m.id != self_id && m.state == "alive")
      out.push_back(m);
  auto holds = [&](const member_info& m) {
    return std::find(m.layers.begin(), m.layers.end(), ref) != m.layers.end();
  };
  std::stable_sort(out.begin(), out.end(), [&](auto& a, auto& b) {
    bool ha = holds(a), hb = holds(b);
    return ha != hb ? ha : a.id < b.id;
  });
  return out;
}

} // namespace dsec::layers
