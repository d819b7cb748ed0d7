// The image-fetch actor (one per node): puts layers this node lacks into its
// local store from peers that hold them, and serves this node's layers to
// peers. Only nodes with their own (not shared) store ever fetch.
//
//   (fetch_atom, std::string ref)             -> layer_info | error (local callers:
//       the layer source's fetcher). Answers at once if the store holds the
//       ref and its image; else one fetch per ref is in flight and every
//       concurrent requester waits for it. Candidates: alive members whose
//       load reports list the ref, then every other alive member (by id).
//       A peer that fails, times out, or sends a corrupt or truncated image
//       is skipped for the next; nothing unverified reaches blobs/.
//   (fetch_atom, std::string ref, fetch_waiter) -> nothing; the same, answered
//       through the waiter's callback (in-process: the layer source's fetcher)
//   (info_atom, std::string ref)              -> layer_info | not_found: a peer
//       asks what this node holds (placement forwards a peer's
//       (fetch_atom, ref) here)
//   (blob_atom, std::string digest, uint64_t offset, uint32_t len)
//                                             -> std::string (at most len bytes,
//       at most 4 MiB; shorter only at the end of the image)
//
// A transfer: the catalog entry from the peer, then chunks requested in a
// pipeline (a few in flight) and written at their offsets with io_uring into
// <store>/tmp/fetch-<random>.erofs, then store::add_blob checks size and
// sha256 against the entry, fsyncs and renames into blobs/ and commits the
// entry. After a fetch the blob cache may evict other unused fetched images.
//
// File work runs on the actor's own small worker pool, never on a scheduler
// thread and never on the node's pool: create workers block on fetches, so
// a burst of creates must not starve the writes those fetches wait for.
#pragma once

#include <caf/fwd.hpp>

#include "layers/layer_source.hpp"
#include "actors/interfaces.hpp"
#include "actors/node_context.hpp"

namespace dsec {

/// Spawns the node's image-fetch actor as a child of `parent` (the node
/// supervisor), which monitors it. Send it (nodes_atom, placement) before the
/// first fetch: placement answers (nodes_atom) with the gossip view.
image_fetch_actor spawn_image_fetch(caf::local_actor* parent, node_context_ptr ctx);

/// The same, unsupervised, with its file work on `io` (tests: a pool they
/// drive themselves).
image_fetch_actor spawn_image_fetch(caf::actor_system& sys, node_context_ptr ctx,
                                    std::shared_ptr<sys::worker_pool> io);

/// A layer_fetcher that blocks its (worker) thread until `fetch` answers (a
/// promise fulfilled by the actor; broken, i.e. `unavailable`, if it stops).
/// Unset it (set_fetcher({})) before the actor system goes.
layer_fetcher make_layer_fetcher(image_fetch_actor fetch);

} // namespace dsec
