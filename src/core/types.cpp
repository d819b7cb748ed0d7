// Names of sandbox states.
#include "core/types.hpp"

namespace dsec {

const char* to_string(sandbox_state s) {
  switch (s) {
    case sandbox_state::creating: return "creating";
    case sandbox_state::running: return "running";
    case sandbox_state::paused: return "paused";
    case sandbox_state::stopped: return "stopped";
    case sandbox_state::failed: return "failed";
    case sandbox_state::lost: return "lost";
  }
  return "unknown";
}

} // namespace dsec
