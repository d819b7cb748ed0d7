// The layer store: content-addressed EROFS images plus a catalog that maps
// `name@version` refs to them. One store root per cluster or node:
//
//   <root>/blobs/sha256-<hex>.erofs   the images, named by their own digest
//   <root>/catalog.json               {"version":1,"layers":{"<ref>":{...}}}
//   <root>/catalog.lock               flock(2) target serialising catalog writers
//   <root>/tmp/                       images being built (never read by anyone)
//
// The root may be a shared mount of a distributed file system, written by
// several nodes at once, so every write is crash safe: images and the catalog
// are written under a temp name, fsynced and renamed into place, and catalog
// updates (read, change, write) happen under an exclusive flock on
// catalog.lock. Readers never lock: rename makes each catalog version whole.
// A crash leaves at worst an orphan file in tmp/ (swept after a day) or an
// unreferenced blob, never a torn catalog or a blob whose name lies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/layer_ref.hpp"
#include "core/types.hpp"

namespace dsec::layers {

/// The timestamp (Unix seconds, 2024-01-01T00:00:00Z) of every file in every
/// layer image, and the SOURCE_DATE_EPOCH given to tools that build layer
/// trees. Fixed so the same tree gives the same digest on any node; not 0
/// because tools inside sandboxes reject files older than 1980 (zip: pip,
/// wheel, jar). Changing it changes every digest.
constexpr const char* image_epoch = "1704067200";

/// Checks a kind: "base", "workspace", "toolkit" or "snapshot". (Names,
/// versions and refs are checked by core/layer_ref.hpp.)
status validate_kind(const std::string& kind);

/// A layer store rooted at one directory. Copyable and cheap; every method is
/// safe to call from several threads and processes at once.
class store {
 public:
  // -- constructors -----------------------------------------------------------

  /// Opens (creating the directories if needed) the store at `root` and checks
  /// that its catalog, if any, is readable. Fails naming the path and cause.
  static expected<store> open(const std::string& root);

  // -- building ---------------------------------------------------------------

  /// Builds an EROFS image of `src_dir` (mkfs.erofs with fixed timestamps and
  /// UUID, so the same tree gives the same digest), stores it under its digest
  /// and records `name@version` -> it. An existing ref with the same digest is
  /// returned as is; one with another digest is errc::conflict. Blocking
  /// (seconds to minutes): call it from a worker thread.
  expected<layer_info> build(const std::string& src_dir, const std::string& name,
                             const std::string& version, const std::string& kind);

  /// How build() lays a layer out.
  struct build_options {
    /// Keep the EROFS image to metadata only and put every file's data in a
    /// separate data blob `blobs/sha256-<data hex>.blob` (mkfs.erofs
    /// --chunksize --blobdev), the image recording the blob's digest (see
    /// layers/blob_device.hpp). The mount cache mounts such an image with
    /// `-o device=<data blob>`. The layer's digest and size_bytes are the
    /// image's; the blob is verified through the digest the image records.
    bool chunked = false;
    /// Chunk size for chunked layers: a power of two >= 4096. 1 MiB keeps the
    /// per-file chunk index small (8 bytes per chunk); smaller chunks dedup
    /// finer but grow the metadata. Reads are per page either way.
    uint32_t chunk_size = 1u << 20;
    /// Exec defaults recorded with the layer in the catalog (not part of
    /// the digest): an image's config, a Dockerfile's ENV/WORKDIR/USER.
    layer_config config;
  };

  /// build() with options; default options are exactly build(). A ref that
  /// exists with the same image but other exec defaults is errc::conflict.
  expected<layer_info> build(const std::string& src_dir, const std::string& name,
                             const std::string& version, const std::string& kind,
                             const build_options& opts);

  /// Commits an image fetched from a peer: checks that `tmp_image` (in this
  /// store's tmp/) has `info.size_bytes` bytes and the digest `info.digest`,
  /// then renames it into blobs/ and records `info.ref` -> it under the
  /// catalog lock, as build() does. A size or digest mismatch is
  /// errc::internal naming both values; the temp file is deleted unless it
  /// became the blob. Blocking (reads the whole image once).
  expected<layer_info> add_blob(const std::string& tmp_image, const layer_info& info);

  // -- queries ----------------------------------------------------------------

  /// Looks up `name@version`: not_found names the ref and the store,
  /// invalid_argument a malformed ref.
  expected<layer_info> resolve(const std::string& ref) const;

  /// Every layer in the catalog, sorted by ref. Errors (an unreadable or
  /// corrupt catalog) are returned, not hidden; see list().
  expected<std::vector<layer_info>> try_list() const;

  /// Every layer in the catalog, sorted by ref; empty if the catalog cannot be
  /// read (use try_list() to learn why).
  std::vector<layer_info> list() const;

  /// The path of the image with `digest` ("sha256:<hex>"); empty for an
  /// invalid digest. The file exists only if some build stored it.
  std::string blob_path(const std::string& digest) const;

  /// The store root as given to open().
  const std::string& root() const { return root_; }

 private:
  explicit store(std::string root);

  expected<std::string> make_image(const std::string& src_dir, const std::string& what) const;
  expected<layer_info> commit(const std::string& tmp_image, layer_info info);
  expected<layer_info> build_plain(const std::string& src_dir, layer_info info);
  expected<layer_info> build_chunked(const std::string& src_dir, layer_info info,
                                     uint32_t chunk_size);

  using catalog_map = std::map<std::string, layer_info>;
  struct catalog_cache;

  /// The catalog, parsed again only when the file changed: every writer
  /// renames a new file into place, so inode, size and mtime name a version.
  /// Keeps the create path (one resolve per layer) at one stat.
  expected<std::shared_ptr<const catalog_map>> load_catalog() const;

  std::string root_;
  std::shared_ptr<catalog_cache> cache_;
};

} // namespace dsec::layers
