// The EROFS on-disk fields this needs (fs/erofs/erofs_fs.h): the superblock
// at byte 1024 holds magic (u32 @0), checksum (u32 @4, crc32c of the rest of
// block 0 with the field zeroed, when feature_compat bit 0 is set),
// feature_compat (u32 @8), blkszbits (u8 @12), extra_devices (u16 @86) and
// devt_slotoff (u16 @88); device slot i sits at byte (devt_slotoff + i) * 128
// and holds tag[64] then blocks (u32 @64). All little-endian.
#include "layers/blob_device.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "layers/digest.hpp"
#include "sys/fd.hpp"

namespace dsec::layers {

namespace {

constexpr off_t sb_offset = 1024;
constexpr uint32_t erofs_magic = 0xE0F5E1E2;
constexpr uint32_t compat_sb_chksum = 0x1;
constexpr size_t slot_size = 128;
constexpr size_t tag_size = 64;

uint32_t get32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t get16(const unsigned char* p) { return uint16_t(p[0] | p[1] << 8); }
void put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The parsed superblock fields, plus block 0 as read (for the checksum).
struct superblock {
  std::string block0;
  uint32_t compat = 0;
  uint32_t block_size = 0;
  uint16_t extra_devices = 0;
  uint16_t slotoff = 0;
};

expected<superblock> read_superblock(int fd, const std::string& image) {
  superblock sb;
  std::string head(sb_offset + 128, '\0');
  auto n = ::pread(fd, head.data(), head.size(), 0);
  if (n < 0)
    return sys_error("read EROFS superblock", image, errno);
  auto* p = reinterpret_cast<const unsigned char*>(head.data()) + sb_offset;
  if (static_cast<size_t>(n) < head.size() || get32(p) != erofs_magic)
    return invalid_argument("read EROFS superblock of " + image + ": not an EROFS image");
  sb.compat = get32(p + 8);
  if (p[12] < 9 || p[12] > 16)
    return invalid_argument("read EROFS superblock of " + image + ": bad block size bits "
                            + std::to_string(p[12]));
  sb.block_size = 1u << p[12];
  sb.extra_devices = get16(p + 86);
  sb.slotoff = get16(p + 88);
  sb.block0.assign(sb.block_size, '\0');
  n = ::pread(fd, sb.block0.data(), sb.block0.size(), 0);
  if (n != static_cast<ssize_t>(sb.block0.size()))
    return invalid_argument("read EROFS superblock of " + image + ": short first block");
  return sb;
}

bool is_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

} // namespace

uint32_t erofs_crc32c(uint32_t seed, const unsigned char* data, size_t len) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = seed;
  for (size_t i = 0; i < len; ++i)
    crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

std::string data_blob_path(const std::string& image_path, const std::string& digest) {
  auto hex = digest_hex(digest);
  if (hex.empty())
    return {};
  auto slash = image_path.rfind('/');
  auto dir = slash == std::string::npos ? std::string{"."} : image_path.substr(0, slash);
  return dir + "/sha256-" + hex + data_blob_suffix;
}

expected<data_blob_ref> read_data_blob_ref(const std::string& image) {
  sys::unique_fd fd{::open(image.c_str(), O_RDONLY | O_CLOEXEC)};
  if (!fd)
    return sys_error("read EROFS device table: open", image, errno,
                     errno == ENOENT ? errc::not_found : errc::internal);
  auto sb = read_superblock(fd.get(), image);
  if (!sb)
    return sb.err();
  if (sb->extra_devices == 0)
    return data_blob_ref{};
  if (sb->extra_devices > 1)
    return invalid_argument("read EROFS device table of " + image + ": "
                            + std::to_string(sb->extra_devices)
                            + " extra devices, dsec layers have at most one data blob");
  unsigned char slot[slot_size];
  if (::pread(fd.get(), slot, slot_size, off_t(sb->slotoff) * slot_size) != off_t(slot_size))
    return invalid_argument("read EROFS device table of " + image + ": device slot past the end");
  std::string tag(reinterpret_cast<const char*>(slot), tag_size);
  if (!is_hex(tag))
    return invalid_argument("read EROFS device table of " + image
                            + ": the data blob is not named by a sha256 digest (an image built"
                              " with plain mkfs.erofs --blobdev? build it with dsec layer build"
                              " --chunked)");
  return data_blob_ref{"sha256:" + tag, get32(slot + 64), sb->block_size};
}

status write_data_blob_ref(const std::string& image, const std::string& digest,
                           uint64_t blob_bytes) {
  auto hex = digest_hex(digest);
  if (hex.size() != tag_size)
    return invalid_argument("record data blob in " + image + ": bad digest \"" + digest + "\"");
  sys::unique_fd fd{::open(image.c_str(), O_RDWR | O_CLOEXEC)};
  if (!fd)
    return sys_error("record data blob: open", image, errno);
  auto sb = read_superblock(fd.get(), image);
  if (!sb)
    return sb.err();
  if (sb->extra_devices != 1)
    return invalid_argument("record data blob in " + image + ": image has "
                            + std::to_string(sb->extra_devices) + " extra devices, expected 1");
  auto blocks = (blob_bytes + sb->block_size - 1) / sb->block_size;
  if (blocks > UINT32_MAX)
    return invalid_argument("record data blob in " + image + ": data blob too large");
  unsigned char slot[slot_size];
  off_t slot_at = off_t(sb->slotoff) * slot_size;
  if (::pread(fd.get(), slot, slot_size, slot_at) != off_t(slot_size))
    return invalid_argument("record data blob in " + image + ": device slot past the end");
  std::memcpy(slot, hex.data(), tag_size);
  put32(slot + 64, static_cast<uint32_t>(blocks));
  if (::pwrite(fd.get(), slot, slot_size, slot_at) != off_t(slot_size))
    return sys_error("record data blob: write device slot", image, errno);
  if (sb->compat & compat_sb_chksum) {
    // Re-read block 0 (the slot may lie in it) and checksum it from the
    // superblock on with the checksum field zeroed, as the kernel verifies.
    auto again = read_superblock(fd.get(), image);
    if (!again)
      return again.err();
    auto* b = reinterpret_cast<unsigned char*>(again->block0.data());
    size_t len = again->block_size > sb_offset ? again->block_size - sb_offset : again->block_size;
    put32(b + sb_offset + 4, 0);
    unsigned char sum[4];
    put32(sum, erofs_crc32c(~0u, b + sb_offset, len));
    if (::pwrite(fd.get(), sum, 4, sb_offset + 4) != 4)
      return sys_error("record data blob: write superblock checksum", image, errno);
  }
  return {};
}

} // namespace dsec::layers
