// The sandbox actor's pause, resume and snapshot handlers: one change at a
// time (a second one while it runs is a conflict); the calls that come
// meanwhile wait for it and run once the sandbox runs again.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <caf/response_promise.hpp>

#include "actors/sandbox.hpp"

namespace dsec {

/// (pause_atom) / (pausefiles_atom) / (resume_atom): `pause` says which;
/// `keep_memory` false pauses by powering the sandbox off (its files kept,
/// its processes and memory gone; the resume boots it again). Idempotent: a
/// sandbox already paused answers its info at once.
void change_pause(sandbox_actor_ptr self, caf::response_promise rp, bool pause,
                  bool keep_memory = true);

/// Blocking: the job that makes a paused sandbox run again, for change_pause
/// and the transparent resume. A frozen one thaws (the same handle back); a
/// powered-off one boots again on its files, with the layer mounts it holds,
/// its current network policy and CPU class, and its layers' start command
/// (a new handle).
std::function<expected<std::shared_ptr<backends::sandbox>>()>
resume_job(const sandbox_actor_state& st);

/// After resume_job succeeded: the actor holds `sb` (a new handle after a
/// boot again, watched for its death like the first).
void adopt_resumed(sandbox_actor_ptr self, std::shared_ptr<backends::sandbox> sb);

/// (snapshot_atom, name, version): the sandbox's changes as a new layer
/// (empty name/version: snapshot/<id>@<unix ms>); resumed first if paused.
void start_snapshot(sandbox_actor_ptr self, caf::response_promise rp, std::string name,
                    std::string version);

} // namespace dsec
