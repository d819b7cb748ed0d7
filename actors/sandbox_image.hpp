// How a create gets its image (a spec's "image", registry/image_resolver.hpp):
// on the create's worker, before any layer is mounted, the image becomes a
// layer ref at the bottom of the spec's layers, waiting only as long as the
// create may. No CAF here: it blocks, on the node's worker pool.
#pragma once

#include <chrono>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec {

struct node_context;

/// How long a create waits for its image (its own pull or another create's):
/// less than placement waits for the create (call_wait_peer), so the caller
/// hears "image X: not resolved within ..." (a timeout naming the image), not
/// a bare "node did not answer". The pull goes on; a later create finds it.
constexpr auto image_wait = call_wait_peer - std::chrono::seconds(15);
static_assert(image_wait > std::chrono::seconds(60) && image_wait < call_wait_peer);

/// Blocking: the spec's image as a layer at the bottom of `spec.layers`
/// (no registry call when this node has it), waiting until `deadline`;
/// nothing to do without an image. Errors keep the resolver's code (404
/// unknown image, 503 registry down, timeout) with "create: " in front.
status resolve_image(const node_context& ctx, sandbox_spec& spec,
                     std::chrono::steady_clock::time_point deadline);

} // namespace dsec
