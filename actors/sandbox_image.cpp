// A spec's image on the create path (sandbox_image.hpp).
#include "actors/sandbox_image.hpp"

#include "actors/node_context.hpp"

namespace dsec {

status resolve_image(const node_context& ctx, sandbox_spec& spec,
                     std::chrono::steady_clock::time_point deadline) {
  if (spec.image.empty())
    return {};
  if (!ctx.images)
    return unavailable("create: image " + spec.image + ": this node resolves no images");
  auto layer = ctx.images->resolve(spec.image, deadline);
  if (!layer)
    return error{layer.err().code, "create: " + layer.err().message};
  spec.layers.insert(spec.layers.begin(), layer->ref);
  return {};
}

} // namespace dsec
