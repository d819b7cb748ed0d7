// The actor protocol of a dsec node, in one place: which messages each actor
// takes and what it answers. Handles are dynamically typed `caf::actor`s (CAF
// 0.17's typed actors cost minutes of compile time per TU on this machine);
// the tables below are the contract, and actor/test exercises each row.
//
// lifecycle (one per node; owns this node's sandboxes):
//   (create_atom, sandbox_spec)               -> sandbox_info | error
//   (info_atom, std::string id)               -> sandbox_info | error
//   (list_atom, std::map<string,string> lbl)  -> std::vector<sandbox_info>
//   (destroy_atom, std::string id)            -> bool existed | error
//   (exec_atom, std::string id, exec_request, uint64_t token)
//                                             -> exec_result | error
//   (stream_atom, std::string id, exec_request, chunk_sink, uint64_t token)
//                                             -> exec_result | error (chunks to the sink)
//   (stream_atom, std::string id, exec_request, caf::actor sink, uint64_t token)
//                                             -> exec_result | error; the remote form:
//     the sink actor gets (stream_atom, uint64_t token, exec_chunk) per chunk
//   (cancel_atom, std::string id, uint64_t token) -> nothing; kills that exec
//     (token: chosen by the caller, unique per caller; 0 = not cancellable;
//      remote clients pick random 64-bit tokens so they never collide)
//   (bgexec_atom, id, exec_request)           -> background_process | error: a
//     background exec, answered once init reported its pid; it runs on
//   (bgexec_atom, id, exec_request, bool keep_stdin) -> the same; stdin stays
//                                                open for (stdin_atom) (E2B stdin: true)
//   (stdin_atom, id, int32_t pid, std::string data, bool close) -> bool | error
//                                                (more stdin for such a command; EOF if
//                                                close; not_found once it ended)
//   (procs_atom, id)                          -> std::vector<process_info> | error
//     (every process of the sandbox)
//   (proc_atom, id, int32_t pid, int64_t wait_ms) -> background_process | error
//     (output so far; waits up to wait_ms for the end; not_found if no such pid)
//   (signal_atom, id, int32_t pid, int32_t signo, bool group) -> bool | error
//     (not_found: no such pid; invalid_argument: pid 1, a bad signal)
//   (wfile_atom, id, path, std::string data)  -> bool | error
//   (rfile_atom, id, path)                    -> std::string | error
//   (pause_atom, id) / (resume_atom, id)      -> sandbox_info | error (idempotent; an
//                                                exec, file, snapshot or network call on a
//                                                paused sandbox resumes it first)
//   (snapshot_atom, id, std::string name, std::string version)
//                                             -> snapshot_info | error (empty name/version:
//                                                snapshot/<id>@<unix ms>)
//   (network_atom, id, network_policy)        -> bool | error (replaces the allow-list)
//   (update_atom, id, std::string cpu_class, bool set_network, network_policy)
//                                             -> sandbox_info | error (PATCH: the class
//                                                if not empty, then the policy if
//                                                set_network; a paused sandbox resumes first)
//   (job_atom, labels, bool pause)            -> job_result: pause (resume) every
//                                                sandbox of this node whose labels
//                                                include `labels` (actors/job_ops.hpp)
//   (rebuilt_atom, id, std::string source, uint64_t upto) -> bool | error (notes in
//                                                id's trajectory log that it was
//                                                rebuilt from source's, up to seq upto)
//   (fsop_atom, id, op, path, to, int32_t depth) -> std::vector<fs_entry> | error
//                                                (core/fs_entry.hpp: stat, list, mkdir,
//                                                move, remove; the E2B filesystem service)
//   (setttl_atom, id, int64_t ttl_s)          -> sandbox_info | error (expires ttl_s
//                                                from now; 0 = never)
//   (layers_atom)                             -> std::vector<layer_info> | error
//   (status_atom)                             -> node_status
//   (shutdown_atom, bool keep_sandboxes)      -> bool (all sandboxes stopped or detached)
//   INTERNAL from sandbox actors: (state_atom, sandbox_info), (gone_atom, id)
//   INTERNAL, reclaim (in-process):
//     (reclaim_atom, caf::actor reclaim)      -> nothing; from the supervisor: the
//                                                actor a create under memory
//                                                pressure asks to reclaim first
//     (usage_atom)                            -> std::vector<reclaim_target>
//                                                (every sandbox: id, state, actor)
//     (usage_atom, reclaim::memory_report)    -> nothing; the last sample, which
//                                                admission, info, list and
//                                                /metrics read
//
// reclaim (one per node; spawned and owned by the supervisor, actors/reclaim.hpp):
//   (reclaim_atom)                            -> reclaim::memory_report: reclaims
//                                                the idle sandboxes now and samples
//                                                again (a create under pressure)
//   INTERNAL: (caf::tick_atom) every --reclaim-interval-ms
//
// sandbox, for reclaim (in-process):
//   (usage_atom)                              -> backend_ref (its backend sandbox,
//                                                weak; empty before it runs)
//
// sandbox (one per sandbox; spawned and supervised by lifecycle):
//   (start_atom)                              -> sandbox_info | error (once, by lifecycle)
//   (exec_atom, exec_request, uint64_t token) -> exec_result | error
//   (stream_atom, exec_request, chunk_sink, uint64_t token) -> exec_result | error
//   (cancel_atom, uint64_t token)             -> nothing
//   (bgexec_atom, exec_request)               -> background_process | error
//   (procs_atom)                              -> std::vector<process_info> | error
//   (proc_atom, int32_t pid, int64_t wait_ms) -> background_process | error
//   (signal_atom, int32_t pid, int32_t signo, bool group) -> bool | error
//   (wfile_atom, path, data)                  -> bool | error
//   (rfile_atom, path)                        -> std::string | error
//   (pause_atom) / (resume_atom)              -> sandbox_info | error
//   (snapshot_atom, name, version)            -> snapshot_info | error
//   (network_atom, network_policy)            -> bool | error
//   (rebuilt_atom, std::string source, uint64_t upto) -> bool | error
//   (update_atom, cpu_class, bool set_network, network_policy) -> sandbox_info | error
//   (info_atom)                               -> sandbox_info (with live denial counts)
//   (destroy_atom)                            -> bool | error; the actor quits after it
//   INTERNAL: (cont_atom, continuation), (ttl_atom, uint64_t gen) (actors/sandbox_ttl.hpp),
//             (died_atom, std::string reason),
//             (pwait_atom, int32_t pid, uint64_t waiter) (a wait's time is up)
//   ADOPTED mode (adopted_sandbox_actor, for node_context::recovered, which
//     lifecycle takes when it is spawned): no (start_atom); it runs at once and
//     sends itself (ttl_atom, gen) at the record's expires_at (at once if past),
//     or, if it was paused, stays paused with its paused_ttl_s deadline
//
// placement (one per node; the front door published on --listen, used by the
// gateway, the SDK and peers; routes by the sandbox id's owner):
//   every lifecycle row above (create, info, list, destroy, exec, stream in
//   both forms, cancel, bgexec, procs, proc, signal, wfile, rfile, update, layers, status), answered for the whole
//   cluster: local ones go to the lifecycle actor, others to the owner's
//   placement actor; an owner that is dead or left answers `lost`
//   (list_atom, labels, bool local_only)      -> std::vector<sandbox_info> (a
//                                                peer's part of a cluster list)
//   (nodes_atom)                              -> std::vector<member_info>
//   (job_atom, labels, bool pause)            -> job_result for the cluster (this
//                                                node and every live peer at once)
//   (job_atom, labels, bool pause, bool local_only) -> job_result (a peer's part)
//   (traj_atom, id, int64_t since)            -> std::string: id's trajectory log as
//                                                NDJSON, records with seq > since (all
//                                                if since < 0); from a live owner, else
//                                                this node's --trajectory-dir
//   (replay_atom, id, int64_t upto)           -> sandbox_info | error: a new sandbox
//                                                rebuilt from id's log up to seq upto
//                                                (< 0: all); actors/sandbox_replay.hpp
//   INTERNAL from gossip: (view_atom, std::vector<member_info>)
//
// gossip (one per node; SWIM over UDP on the --listen port number):
//   (nodes_atom)                              -> std::vector<member_info>
//   (leave_atom)                              -> bool, once the leave has spread
//   INTERNAL: (caf::tick_atom), (load_atom), (packet_atom, datagram),
//             (leave_atom, bool)
//
// gateway (one per node; the only actor that knows HTTP):
//   (http_atom, http_call)                    -> nothing; answers through http_call::respond
//
// Errors travel as caf::error of category "dsec" (actors/caf_error.hpp), so a
// caller on another node gets the same code and message.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>

#include <caf/actor.hpp>

#include "actors/reclaim_policy.hpp"
#include "core/types.hpp"

namespace dsec::backends {
class sandbox;
} // namespace dsec::backends

namespace dsec {

/// Receives streamed exec output, from any thread. In-process only.
struct chunk_sink {
  std::function<void(exec_chunk)> fn;
};

/// A closure that must run inside an actor (results of blocking work or of
/// backend callbacks, sent to the actor that waits for them). In-process only.
struct continuation {
  std::function<void()> fn;
};

/// A sandbox actor's backend sandbox, for the reclaim actor, which measures
/// and squeezes it from the worker pool. Weak: reclaim never keeps a
/// destroyed sandbox alive. In-process only.
struct backend_ref {
  std::weak_ptr<backends::sandbox> sb;
};

/// One sandbox as the lifecycle actor lists it for reclaim. In-process only.
struct reclaim_target {
  std::string id;
  sandbox_state state = sandbox_state::creating;
  caf::actor actor;
};

} // namespace dsec

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::backend_ref)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::reclaim_target)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<dsec::reclaim_target>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::reclaim::memory_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::chunk_sink)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::continuation)
