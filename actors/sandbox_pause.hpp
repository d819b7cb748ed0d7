// The sandbox actor's pause, resume and snapshot handlers: one change at a
// time (a second one while it runs is a conflict); the calls that come
// meanwhile wait for it and run once the sandbox runs again.
#pragma once

#include <string>

#include <caf/response_promise.hpp>

#include "actors/sandbox.hpp"

namespace dsec {

/// (pause_atom) / (resume_atom): `pause` says which. Idempotent: a sandbox
/// already there answers its info at once.
void change_pause(sandbox_actor_ptr self, caf::response_promise rp, bool pause);

/// (snapshot_atom, name, version): the sandbox's changes as a new layer
/// (empty name/version: snapshot/<id>@<unix ms>); resumed first if paused.
void start_snapshot(sandbox_actor_ptr self, caf::response_promise rp, std::string name,
                    std::string version);

} // namespace dsec
