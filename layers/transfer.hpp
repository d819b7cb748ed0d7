// The store side of moving layers between peers, without actors: what this
// node holds and serves (a layer's entry with its image present, a chunk of
// an image or data blob read at an offset), and committing what a fetch wrote
// to a temp file (the image verified by store::add_blob, then the data blob a
// chunked layer names, verified against its digest). Every call blocks on
// file work. The image-fetch actor (actors/image_fetch.hpp) runs the peer
// protocol and calls these on its own worker pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers {

class store;

/// The most a peer hands out per chunk request, whatever is asked: bounds the
/// memory one request pins on the serving node.
constexpr uint32_t max_chunk_bytes = 4u << 20;

/// `ref`'s entry if `st` holds it with its image; not_found (naming
/// `node_id`) if the catalog knows it without its image.
expected<layer_info> resolve_held(const store& st, const std::string& ref,
                                  const std::string& node_id);

/// Up to `len` bytes (at most max_chunk_bytes) from `offset` of the image or
/// data blob `digest`; shorter only at its end. invalid_argument for a bad
/// digest, not_found if neither file exists.
expected<std::string> read_image_chunk(const store& st, const std::string& digest,
                                       uint64_t offset, uint32_t len);

/// A fetched image committed to the store and, for a chunked layer whose data
/// blob this node lacks, what to fetch next.
struct committed_image {
  layer_info info;
  /// The data blob to fetch; empty: the layer is complete.
  std::string data_digest;
  /// Its size is at most this many bytes ...
  uint64_t data_max = 0;
  /// ... and at least data_max - slack (its last block may be short).
  uint64_t slack = 0;
};

/// Commits the fetched image at `tmp` as `info` (size and sha256 verified by
/// the store; `tmp` is deleted on failure), then reads which data blob it names.
expected<committed_image> commit_fetched_image(store& st, const std::string& tmp,
                                               const layer_info& info);

/// Verifies the fetched data blob at `tmp` against `digest` and renames it
/// next to `info`'s image (fsyncing blobs/); deletes `tmp` on failure.
expected<bool> commit_fetched_data_blob(store& st, const std::string& tmp,
                                        const layer_info& info, const std::string& digest);

/// The peers to ask for `ref`, in order: alive members other than `self_id`
/// whose load reports list `ref`, then the other alive members, each group by id.
std::vector<member_info> fetch_candidates(const std::vector<member_info>& view,
                                          const std::string& self_id, const std::string& ref);

} // namespace dsec::layers
