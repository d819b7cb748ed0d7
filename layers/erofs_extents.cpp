// The data blob extents of an EROFS image (see erofs_extents.hpp). Fields
// used, all little-endian (fs/erofs/erofs_fs.h):
//
//   superblock @1024  blkszbits u8 @12, root_nid u16 @14, meta_blkaddr u32 @40,
//                     extra_devices u16 @86, devt_slotoff u16 @88
//   device slot i     @ (devt_slotoff + i) * 128: mapped_blkaddr u32 @68
//   inode @ (meta_blkaddr << blkszbits) + nid * 32
//                     i_format u16 @0 (bit 0 extended, bits 1-3 layout),
//                     i_xattr_icount u16 @2, i_mode u16 @4, i_size (compact
//                     u32 @8, extended u64 @8), i_u u32 @16; 32 or 64 bytes,
//                     then 12 + 4 * (icount - 1) bytes of xattrs when icount > 0
//   flat dir          blocks at i_u << blkszbits; tail-packed: the last block
//                     follows the inode and its xattrs; dirents of 12 bytes
//                     (nid u64 @0, nameoff u16 @8), the first nameoff / 12 of them
//   chunk-based file  i_u's low u16: chunk bits over blkszbits (& 0x1f),
//                     0x20 = 8-byte indexes (device_id u16 @2, blkaddr u32 @4),
//                     else 4-byte block addresses; aligned to the entry size
//                     after the inode and its xattrs; blkaddr ~0 is a hole
#include "layers/erofs_extents.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <unordered_set>

namespace dsec::layers {

namespace {

constexpr uint64_t sb_offset = 1024;
constexpr uint32_t erofs_magic = 0xE0F5E1E2;
constexpr unsigned layout_flat_plain = 0, layout_flat_inline = 2, layout_chunk_based = 4;
constexpr uint32_t null_addr = 0xFFFFFFFF;
/// Bound on a metadata image read whole: chunked layers keep only inodes,
/// directories and chunk indexes there (a few MB for a 200 MB image).
constexpr uint64_t max_image_bytes = 512ull << 20;
/// Bound on inodes walked, against a corrupt image's directory cycles.
constexpr size_t max_inodes = 16u << 20;

class reader {
 public:
  reader(const std::string& bytes, const std::string& what) : b_(bytes), what_(what) {}

  bool has(uint64_t off, uint64_t len) const { return off <= b_.size() && len <= b_.size() - off; }
  uint64_t u(uint64_t off, int width) const {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i)
      v = v << 8 | static_cast<unsigned char>(b_[off + uint64_t(i)]);
    return v;
  }
  error bad(const std::string& why) const {
    return invalid_argument("read the data blob extents of " + what_ + ": " + why);
  }

 private:
  const std::string& b_;
  const std::string& what_;
};

struct inode_view {
  uint64_t at = 0;      ///< byte offset in the image
  uint64_t body = 0;    ///< just past the inode and its inline xattrs
  unsigned layout = 0;
  uint16_t mode = 0;
  uint64_t size = 0;
  uint32_t i_u = 0;
};

} // namespace

expected<std::vector<blob_extent>> parse_blob_extents(const std::string& bytes,
                                                      const std::string& what) {
  reader r{bytes, what};
  if (!r.has(sb_offset, 128) || r.u(sb_offset, 4) != erofs_magic)
    return r.bad("not an EROFS image");
  const unsigned blkbits = unsigned(r.u(sb_offset + 12, 1));
  if (blkbits < 9 || blkbits > 16)
    return r.bad("block size bits " + std::to_string(blkbits));
  const uint64_t bsz = 1ull << blkbits;
  const uint64_t root = r.u(sb_offset + 14, 2);
  const uint64_t meta = r.u(sb_offset + 40, 4) << blkbits;
  const unsigned extra = unsigned(r.u(sb_offset + 86, 2));
  uint64_t mapped = 0;  // the data blob's first block in flat addressing, 0: none
  if (extra > 0) {
    uint64_t slot = r.u(sb_offset + 88, 2) * 128;
    if (!r.has(slot, 128))
      return r.bad("device slot past the end");
    mapped = r.u(slot + 68, 4);
  }
  // Device ids are masked as the kernel masks them.
  uint32_t id_mask = 1;
  while (id_mask < extra + 1)
    id_mask <<= 1;
  id_mask -= 1;

  auto load = [&](uint64_t nid) -> expected<inode_view> {
    inode_view v;
    v.at = meta + nid * 32;
    if (!r.has(v.at, 32))
      return r.bad("inode " + std::to_string(nid) + " past the end");
    auto format = r.u(v.at, 2);
    bool extended = format & 1;
    if (extended && !r.has(v.at, 64))
      return r.bad("inode " + std::to_string(nid) + " past the end");
    v.layout = unsigned(format >> 1) & 7;
    auto icount = r.u(v.at + 2, 2);
    v.mode = uint16_t(r.u(v.at + 4, 2));
    v.size = extended ? r.u(v.at + 8, 8) : r.u(v.at + 8, 4);
    v.i_u = uint32_t(r.u(v.at + 16, 4));
    v.body = v.at + (extended ? 64 : 32) + (icount ? 12 + 4 * (icount - 1) : 0);
    return v;
  };

  std::vector<blob_extent> out;
  std::unordered_set<uint64_t> seen{root};
  std::vector<uint64_t> todo{root};
  while (!todo.empty()) {
    if (seen.size() > max_inodes)
      return r.bad("more than " + std::to_string(max_inodes) + " inodes");
    auto nid = todo.back();
    todo.pop_back();
    auto ino = load(nid);
    if (!ino)
      return ino.err();
    if (S_ISDIR(ino->mode)) {
      if (ino->layout != layout_flat_plain && ino->layout != layout_flat_inline)
        return r.bad("directory inode " + std::to_string(nid) + " has layout "
                     + std::to_string(ino->layout));
      const uint64_t blocks = (ino->size + bsz - 1) / bsz;
      for (uint64_t i = 0; i < blocks; ++i) {
        uint64_t len = std::min(bsz, ino->size - i * bsz);
        bool tail = ino->layout == layout_flat_inline && i + 1 == blocks;
        uint64_t at = tail ? ino->body : (uint64_t(ino->i_u) << blkbits) + i * bsz;
        if (!r.has(at, len) || len < 12)
          return r.bad("directory block " + std::to_string(i) + " of inode "
                       + std::to_string(nid) + " past the end");
        uint64_t count = r.u(at + 8, 2) / 12;
        if (count == 0 || count * 12 > len)
          return r.bad("directory block " + std::to_string(i) + " of inode "
                       + std::to_string(nid) + " has a bad first name offset");
        for (uint64_t d = 0; d < count; ++d) {
          auto child = r.u(at + d * 12, 8);
          if (seen.insert(child).second)
            todo.push_back(child);
        }
      }
      continue;
    }
    if (!S_ISREG(ino->mode) || ino->layout != layout_chunk_based || ino->size == 0)
      continue;
    const uint32_t format = ino->i_u & 0xFFFF;
    const unsigned chunkbits = blkbits + (format & 0x1F);
    if (chunkbits > 40)
      return r.bad("inode " + std::to_string(nid) + " has chunk bits " + std::to_string(chunkbits));
    const bool indexes = format & 0x20;
    const uint64_t unit = indexes ? 8 : 4;
    const uint64_t chunk = 1ull << chunkbits;
    const uint64_t chunks = (ino->size + chunk - 1) / chunk;
    const uint64_t table = (ino->body + unit - 1) / unit * unit;
    if (chunks > bytes.size() / unit || !r.has(table, chunks * unit))
      return r.bad("the chunk table of inode " + std::to_string(nid) + " runs past the end");
    blob_extent run{};
    bool open = false;
    for (uint64_t c = 0; c < chunks; ++c) {
      uint64_t e = table + c * unit;
      uint64_t blkaddr = indexes ? r.u(e + 4, 4) : r.u(e, 4);
      uint32_t device = indexes ? uint32_t(r.u(e + 2, 2)) & id_mask : 0;
      if (blkaddr == null_addr)
        continue;
      uint64_t start;
      if (device > 0)
        start = blkaddr << blkbits;
      else if (mapped > 0 && blkaddr >= mapped)
        start = (blkaddr - mapped) << blkbits;
      else
        continue;  // in the image itself
      uint64_t end = start + std::min(chunk, ino->size - c * chunk);
      if (open && start == run.end) {
        run.end = end;
        continue;
      }
      if (open)
        out.push_back(run);
      run = {start, end};
      open = true;
    }
    if (open)
      out.push_back(run);
  }
  std::sort(out.begin(), out.end(),
            [](const blob_extent& a, const blob_extent& b) { return a.start < b.start; });
  // Deduplicated chunks make files share bytes: merge what overlaps (not
  // what only touches: those are different files).
  std::vector<blob_extent> merged;
  for (auto& e : out) {
    if (!merged.empty() && e.start < merged.back().end)
      merged.back().end = std::max(merged.back().end, e.end);
    else
      merged.push_back(e);
  }
  return merged;
}

expected<std::vector<blob_extent>> read_blob_extents(const std::string& image) {
  struct stat st;
  if (::stat(image.c_str(), &st) != 0)
    return sys_error("read the data blob extents: stat", image, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  if (uint64_t(st.st_size) > max_image_bytes)
    return invalid_argument("read the data blob extents of " + image + ": "
                            + std::to_string(st.st_size) + " bytes is past the "
                            + std::to_string(max_image_bytes >> 20) + " MiB bound");
  std::ifstream in(image, std::ios::binary);
  if (!in)
    return sys_error("read the data blob extents: open", image, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_blob_extents(ss.str(), image);
}

std::string encode_blob_extents(const std::vector<blob_extent>& extents) {
  std::string out;
  out.reserve(extents.size() * 16);
  for (auto& e : extents)
    for (uint64_t v : {e.start, e.end})
      for (int i = 0; i < 8; ++i)
        out.push_back(char(v >> (8 * i)));
  return out;
}

expected<std::vector<blob_extent>> decode_blob_extents(const std::string& bytes) {
  if (bytes.size() % 16 != 0)
    return invalid_argument("blob extents: " + std::to_string(bytes.size())
                            + " bytes is not a whole number of 16-byte extents");
  std::string what = "blob extents";
  reader r{bytes, what};
  std::vector<blob_extent> out;
  out.reserve(bytes.size() / 16);
  for (uint64_t at = 0; at < bytes.size(); at += 16) {
    blob_extent e{r.u(at, 8), r.u(at + 8, 8)};
    if (e.end <= e.start || (!out.empty() && e.start < out.back().end))
      return invalid_argument("blob extents: extent " + std::to_string(at / 16)
                              + " is empty or not after the one before it");
    out.push_back(e);
  }
  return out;
}

const blob_extent* extent_at(const std::vector<blob_extent>& extents, uint64_t offset) {
  auto it = std::upper_bound(extents.begin(), extents.end(), offset,
                             [](uint64_t off, const blob_extent& e) { return off < e.start; });
  if (it == extents.begin())
    return nullptr;
  --it;
  return offset < it->end ? &*it : nullptr;
}

} // namespace dsec::layers
