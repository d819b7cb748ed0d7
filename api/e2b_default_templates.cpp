// The hint for a built-in template whose layers are missing
// (e2b_default_templates.hpp).
#include "api/e2b_default_templates.hpp"

namespace dsec::e2b {

std::string default_layers_command(std::string_view template_id) {
  if (template_id == "base")
    return "dsec layer defaults --e2b";
  if (template_id == "python" || template_id == "busybox" || template_id == "code-interpreter-v1"
      || template_id == "code-interpreter")
    return "dsec layer defaults";
  return {};
}

error with_default_layers_hint(error err, std::string_view template_id) {
  auto cmd = default_layers_command(template_id);
  if (err.code != errc::not_found || cmd.empty() || err.message.find("layer ") == std::string::npos)
    return err;
  err.message = "template " + std::string{template_id} + ": " + err.message
                + " (this node's store lacks the template's layers; build them with `" + cmd
                + "` and the node's --store or --state-dir)";
  return err;
}

} // namespace dsec::e2b
