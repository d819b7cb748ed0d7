// The sandbox actor: one per sandbox, spawned by the lifecycle actor. It owns
// the backend's sandbox object and the layer mounts it holds, serialises state
// changes (creating -> running -> stopped | failed), arms the TTL and turns
// exec and file calls into backend calls that never block its thread.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/node_context.hpp"
#include "core/types.hpp"

namespace dsec {

/// State of one sandbox actor.
struct sandbox_actor_state {
  static inline const char* name = "sandbox";
  node_context_ptr ctx;
  caf::actor lifecycle;
  sandbox_spec spec;
  sandbox_info info;
  std::shared_ptr<backends::sandbox> sb;
  /// Layer digests whose mounts this sandbox holds.
  std::vector<std::string> digests;
  /// Execs started and not yet reported back.
  int inflight = 0;
  /// Caller tokens of running execs -> backend exec ids (for cancel).
  std::unordered_map<uint64_t, uint64_t> cancellable;
  /// Set once destroy has begun; later destroys wait for the first.
  bool destroying = false;
  bool destroyed = false;
  std::vector<caf::response_promise> destroy_waiters;
};

using sandbox_actor_ptr = caf::stateful_actor<sandbox_actor_state>*;

/// What a sandbox looks like before it runs (state creating).
sandbox_info initial_info(const std::string& id, const std::string& node,
                          const sandbox_spec& spec);

/// Spawned by lifecycle with the id and spec; waits for (start_atom).
caf::behavior sandbox_actor(sandbox_actor_ptr self, node_context_ptr ctx, caf::actor lifecycle,
                            std::string id, sandbox_spec spec);

} // namespace dsec
