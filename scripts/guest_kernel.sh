#!/bin/sh
# Fetches the guest kernel of the microvm and vm backends into a cache dir
# (default /var/lib/dsec/guest): Debian's linux-image package is downloaded
# with `apt-get download` and unpacked with `dpkg-deb -x` (never installed on
# the host); the uncompressed vmlinux is cut out of vmlinuz (the
# scripts/extract-vmlinux approach: find the compression magic, decompress,
# keep the first result that is an ELF file), because a compressed bzImage
# costs ~3 s of decompression under TCG. The few modules the guest agent
# loads (virtio, block, console, erofs, overlay, ext4 for the writable
# upper disk) are copied next to it.
# Idempotent: does nothing when the cache is complete.
#
# Usage: scripts/guest_kernel.sh [CACHE_DIR]
set -eu
cache=${1:-/var/lib/dsec/guest}
if [ -s "$cache/vmlinux" ] && [ -s "$cache/modules/overlay.ko" ] && [ -s "$cache/modules/ext4.ko" ]; then
  echo "guest kernel: $(cat "$cache/version") in $cache (cached)"
  exit 0
fi
pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1)
[ -n "$pkg" ] || { echo "guest kernel: apt-cache knows no linux-image-amd64 (run apt-get update)" >&2; exit 1; }
ver=${pkg#linux-image-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) ||
  { echo "guest kernel: apt-get download $pkg failed" >&2; exit 1; }
dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/x"
mkdir -p "$cache.new/modules"
python3 - "$tmp/x/boot/vmlinuz-$ver" "$cache.new/vmlinux" <<'PY'
import bz2, gzip, lzma, sys, zlib
data = open(sys.argv[1], 'rb').read()
def unxz(b): return lzma.LZMADecompressor().decompress(b)
def ungz(b): return zlib.decompressobj(31).decompress(b)
def unbz(b): return bz2.BZ2Decompressor().decompress(b)
formats = [(b'\xfd7zXZ\x00', unxz), (b'\x1f\x8b\x08', ungz), (b'BZh', unbz)]
for magic, fn in formats:
    pos = data.find(magic)
    while pos >= 0:
        try:
            out = fn(data[pos:])
            if out[:4] == b'\x7fELF':
                open(sys.argv[2], 'wb').write(out)
                sys.exit(0)
        except Exception:
            pass
        pos = data.find(magic, pos + 1)
sys.exit("guest kernel: no compressed ELF kernel found in " + sys.argv[1])
PY
kdir="$tmp/x/lib/modules/$ver/kernel"
for m in crypto/crc32c_generic lib/libcrc32c fs/erofs/erofs fs/overlayfs/overlay \
         drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio \
         drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci_legacy_dev \
         drivers/virtio/virtio_pci drivers/block/virtio_blk drivers/char/virtio_console \
         lib/crc16 fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4; do
  f=$(ls "$kdir/$m.ko"* 2>/dev/null | head -n1)
  [ -n "$f" ] || { echo "guest kernel: module $m missing in $pkg" >&2; exit 1; }
  case $f in
    *.ko.xz) xz -dc "$f" > "$cache.new/modules/$(basename "$m").ko" ;;
    *.ko.zst) zstd -qdc "$f" > "$cache.new/modules/$(basename "$m").ko" ;;
    *) cp "$f" "$cache.new/modules/" ;;
  esac
done
echo "$ver" > "$cache.new/version"
rm -rf "$cache"
mv "$cache.new" "$cache"
echo "guest kernel: $ver in $cache"
