// TEMPORARY, deleted at merge: push_layer is implemented in
// registry/layer_artifact.cpp on another branch. This stand-in lets the
// reg-pull branch link `dsec layer push`; it fails plainly instead of pushing.
#include "registry/layer_artifact.hpp"

namespace dsec::registry {

expected<std::string> push_layer(const layers::store&, const std::string& layer_ref,
                                 const image_reference& target, const registry_options&) {
  return internal_error("push " + layer_ref + " to " + target.str() +
                        ": not yet (layer artifacts are not in this build)");
}

} // namespace dsec::registry
