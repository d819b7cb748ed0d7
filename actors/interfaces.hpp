// The actor protocol of a dsec node, in one place: which messages each actor
// takes and what it answers, as typed actor handles, so a message an actor
// does not take, or an answer of the wrong type, fails the build (CAF checks
// every handler set against its interface, and every request and `.then`
// against the handle's). Rows marked INTERNAL are self-sent, or sent by the
// supervisor or a helper thread; everything else is public.
//
// The front door (placement) speaks the sandbox API below for the whole
// cluster; the lifecycle actor speaks it for this node's sandboxes, and one
// sandbox actor per sandbox serves the id-less form. Semantics of each row:
//   create   -> the sandbox, running (or an error: admission, backend)
//   info, list(labels), destroy(id) -> bool existed (idempotent)
//   exec(id, req, token)  token: chosen by the caller, unique per caller;
//                         0 = not cancellable (remote clients pick random ones)
//   stream(id, req, sink, token): the same, and every chunk of output goes to
//                         `sink` as (stream_atom, token, exec_chunk) before the
//                         answer leaves the node (actors/chunk_relay.hpp feeds
//                         an in-process callback)
//   cancel(id, token)     kills that exec; no answer
//   bgexec(id, req[, keep_stdin]) -> the background process once init reported
//                         its pid; stdin(id, pid, data, close) more input for it
//   procs(id) every process; proc(id, pid, wait_ms) output so far, waiting up
//                         to wait_ms for the end; signal(id, pid, signo, group)
//   wfile(id, path, data); rfile(id, path, max_bytes) (too_large past it)
//   pause / resume(id)    idempotent; an exec, file, snapshot or network call
//                         on a paused sandbox resumes it first
//   snapshot(id, name, version) (empty: snapshot/<id>@<unix ms>)
//   network(id, policy)   replaces the allow-list
//   update(id, cpu_class, set_network, policy): PATCH, the class if not empty,
//                         then the policy if set_network
//   fsop(id, op, path, to, depth): stat, list, mkdir, move, remove (E2B files)
//   setttl(id, ttl_s)     expires ttl_s from now; 0 = never
//   rebuilt(id, source, upto): notes in id's log that it was rebuilt from
//                         source's log up to seq upto (actors/sandbox_replay.hpp)
//   job(labels, pause)    pause (resume) every sandbox whose labels include
//                         `labels`: on the lifecycle this node's, on placement
//                         the cluster's (actors/job_ops.hpp)
//   layers, status, metrics (every running sandbox with live denial counts)
//   sbmetrics(id)         one sample of the sandbox's CPU and memory use
// The rows about one sandbox are declared in actors/operations.hpp.
//
// Errors travel as caf::error of category "dsec" (actors/caf_error.hpp), so a
// caller on another node gets the same code and message.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"
#include "actors/operations.hpp"
#include "policy/reclaim_policy.hpp"
#include "core/fs_entry.hpp"
#include "core/job.hpp"
#include "core/types.hpp"

namespace dsec::backends {
class sandbox;
} // namespace dsec::backends

namespace dsec {

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

using label_map = std::map<std::string, std::string>;

// -- the sandbox API: rows every front speaks --------------------------------

/// The rows about sandboxes that both the lifecycle actor (this node's) and
/// placement (the cluster's) answer; see the table above. The rows about one
/// sandbox (atom, id, args... -> reply) come from its declaration in
/// actors/operations.hpp; these are the others.
using sandbox_api = ops::sandbox_handle<
  ops::with_id,
  caf::replies_to<create_atom, sandbox_spec>::with<sandbox_info>,
  caf::replies_to<list_atom, label_map>::with<std::vector<sandbox_info>>,
  caf::replies_to<job_atom, label_map, bool>::with<job_result>,
  caf::replies_to<layers_atom>::with<std::vector<layer_info>>,
  caf::replies_to<status_atom>::with<node_status>,
  caf::replies_to<metrics_atom>::with<std::vector<sandbox_info>>>;

// -- one sandbox ---------------------------------------------------------------

/// One sandbox's actor (actors/sandbox.hpp), spawned and supervised by the
/// lifecycle actor: the operations of actors/operations.hpp without the id
/// (atom, args... -> reply), plus its start. Its info has live denial
/// counts; it quits after it answers destroy.
using sandbox_actor = ops::sandbox_handle<
  ops::without_id,
  /// Once, by lifecycle: provisions the sandbox; answers it running.
  caf::replies_to<start_atom>::with<sandbox_info>,
  /// For reclaim: the backend sandbox (weak; empty before it runs).
  caf::replies_to<usage_atom>::with<backend_ref>,
  /// INTERNAL: results of its blocking work and backend callbacks.
  caf::reacts_to<cont_atom, continuation>,
  /// INTERNAL: a TTL timer of generation `gen` (actors/sandbox_ttl.hpp).
  caf::reacts_to<ttl_atom, uint64_t>,
  /// INTERNAL: after a reclaim pass, since when its CPU was quiet (0 =
  /// busy), for its idle policy (actors/sandbox_idle.hpp).
  caf::reacts_to<idle_atom, int64_t>,
  /// INTERNAL: init died (the backend's exit callback), with the reason.
  caf::reacts_to<died_atom, std::string>,
  /// INTERNAL: a process wait's time is up (pid, waiter).
  caf::reacts_to<pwait_atom, int32_t, uint64_t>>;

/// One sandbox as the lifecycle actor lists it for reclaim. In-process only.
struct reclaim_target {
  std::string id;
  sandbox_state state = sandbox_state::creating;
  sandbox_actor actor;
};

// -- reclaim -------------------------------------------------------------------

/// The reclaim actor (one per node, actors/reclaim.hpp).
using reclaim_actor = caf::typed_actor<
  /// Reclaims the idle sandboxes now and samples again (a create under
  /// memory pressure asks this before it decides).
  caf::replies_to<reclaim_atom>::with<reclaim::memory_report>,
  /// INTERNAL: every --reclaim-interval-ms.
  caf::reacts_to<caf::tick_atom>,
  /// INTERNAL: results of its work on the pool.
  caf::reacts_to<cont_atom, continuation>>;

// -- lifecycle -----------------------------------------------------------------

/// The lifecycle actor (one per node, actors/lifecycle.hpp): the sandbox API
/// for this node's sandboxes, plus what the node's own actors tell it.
using lifecycle_actor = sandbox_api::extend<
  /// Stops or (keep) detaches every sandbox; answers once all are gone.
  caf::replies_to<shutdown_atom>::with<bool>,
  /// INTERNAL, from sandbox actors: a sandbox's new info, and its end.
  caf::reacts_to<state_atom, sandbox_info>,
  caf::reacts_to<gone_atom, std::string>,
  /// INTERNAL, from the supervisor: the actor a create under memory pressure
  /// asks to reclaim first.
  caf::reacts_to<reclaim_atom, reclaim_actor>,
  /// INTERNAL, reclaim: every sandbox (id, state, actor), for a pass.
  caf::replies_to<usage_atom>::with<std::vector<reclaim_target>>,
  /// INTERNAL, reclaim: the last sample, which admission, info, list and
  /// /metrics read.
  caf::reacts_to<usage_atom, reclaim::memory_report>,
  /// INTERNAL: results of its blocking work.
  caf::reacts_to<cont_atom, continuation>>;

// -- placement -----------------------------------------------------------------

/// The placement actor (one per node, actors/placement.hpp): the front door
/// published on --listen, used by the gateway, the SDK and peers. The sandbox
/// API for the whole cluster (local sandboxes go to the lifecycle actor,
/// others to their owner's placement; an owner that is dead or left answers
/// `lost`), plus the cluster's own rows.
using placement_actor = sandbox_api::extend<
  /// A peer's part of a cluster-wide list: this node's own sandboxes.
  caf::replies_to<list_atom, label_map, bool>::with<std::vector<sandbox_info>>,
  /// A peer's part of a cluster-wide job: this node's own sandboxes.
  caf::replies_to<job_atom, label_map, bool, bool>::with<job_result>,
  /// The gossip view, this node first.
  caf::replies_to<nodes_atom>::with<std::vector<member_info>>,
  /// id's trajectory log as NDJSON, records with seq > since (all if < 0):
  /// from a live owner, else this node's --trajectory-dir.
  caf::replies_to<traj_atom, std::string, int64_t>::with<std::string>,
  /// A new sandbox rebuilt from id's log up to seq upto (< 0: all).
  caf::replies_to<replay_atom, std::string, int64_t>::with<sandbox_info>,
  /// FnCall on this node's warm pool.
  caf::replies_to<fncall_atom, fncall_request>::with<exec_result>,
  /// Image fetch between peers: what this node holds of a ref, and part of
  /// an image (served by the image-fetch actor).
  caf::replies_to<fetch_atom, std::string>::with<layer_info>,
  caf::replies_to<blob_atom, std::string, uint64_t, uint32_t>::with<std::string>,
  /// INTERNAL, from gossip: the view, on every change.
  caf::reacts_to<view_atom, std::vector<member_info>>,
  /// INTERNAL: results of its disk reads.
  caf::reacts_to<cont_atom, continuation>>;

// -- image fetch and fncall ----------------------------------------------------

/// A waiter of an in-process fetch (the layer source's fetcher thread).
struct fetch_waiter {
  std::function<void(expected<layer_info>)> fn;
};

/// The image-fetch actor (one per node, actors/image_fetch.hpp).
using image_fetch_actor = caf::typed_actor<
  /// This node's callers: the layer, fetched from peers if the store lacks it.
  caf::replies_to<fetch_atom, std::string>::with<layer_info>,
  /// The same, answered through the waiter's callback.
  caf::reacts_to<fetch_atom, std::string, fetch_waiter>,
  /// A peer asks what this node holds of a ref.
  caf::replies_to<info_atom, std::string>::with<layer_info>,
  /// A peer reads part of an image (digest, offset, len).
  caf::replies_to<blob_atom, std::string, uint64_t, uint32_t>::with<std::string>,
  /// INTERNAL, from the supervisor: the front door, asked for the gossip
  /// view (nodes_atom) when a fetch picks its peers.
  caf::reacts_to<nodes_atom, placement_actor>,
  /// INTERNAL: results of its file work.
  caf::reacts_to<cont_atom, continuation>>;

/// The FnCall actor (one per node, detached, actors/fncall.hpp).
using fncall_actor = caf::typed_actor<
  caf::replies_to<fncall_atom, fncall_request>::with<exec_result>,
  /// INTERNAL: results from the pool's threads.
  caf::reacts_to<cont_atom, continuation>>;

} // namespace dsec

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::backend_ref)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::reclaim_target)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<dsec::reclaim_target>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::reclaim::memory_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::continuation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::fetch_waiter)

// -- gateway, gossip, supervisor (issue 24 part 4) ------------------------------

// Kept inside this block: what its rows need beyond the includes above.
#include <set>

#include <caf/node_id.hpp>

namespace dsec {

class http_exchange;
/// One HTTP request in flight (actors/http_server.hpp). In-process only.
using http_call = std::shared_ptr<http_exchange>;

/// A datagram from the gossip actor's receiver thread (defined in
/// actors/gossip_actor.cpp). In-process only.
struct gossip_packet;
using gossip_packet_ptr = std::shared_ptr<gossip_packet>;

/// The REST gateway actor (one per node, actors/gateway.hpp): the only actor
/// that knows HTTP. The Beast server's threads hand it every request.
using gateway_actor = caf::typed_actor<
  /// A parsed request; answered through the call itself, never by message.
  caf::reacts_to<http_atom, http_call>,
  /// INTERNAL: timed steps of E2B streams and results of blocking work.
  caf::reacts_to<cont_atom, continuation>>;

/// The gossip actor (one per node, actors/gossip_actor.hpp): SWIM
/// membership over UDP; pushes the view to placement (view_atom).
using gossip_actor = caf::typed_actor<
  /// The membership view as it stands.
  caf::replies_to<nodes_atom>::with<std::vector<member_info>>,
  /// Leaves the cluster; answers once the leave had time to spread.
  caf::replies_to<leave_atom>::with<bool>,
  /// INTERNAL: the leave had time to spread.
  caf::reacts_to<leave_atom, bool>,
  /// INTERNAL: the protocol timers' tick and the load report's.
  caf::reacts_to<caf::tick_atom>,
  caf::reacts_to<load_atom>,
  /// INTERNAL: a datagram from the receiver thread.
  caf::reacts_to<packet_atom, gossip_packet_ptr>>;

/// The node supervisor (one per node, actors/node_supervisor.hpp): spawns,
/// monitors and stops every actor above.
using supervisor_actor = caf::typed_actor<
  /// The front door to publish on --listen, the REST gateway, and the
  /// image-fetch actor the layer source's fetcher asks.
  caf::replies_to<caf::get_atom>::with<placement_actor, gateway_actor, image_fetch_actor>,
  /// Begins the orderly stop; the supervisor quits when it is done.
  caf::reacts_to<shutdown_atom>>;

/// The seam between peer_links (actors/peer_links.hpp) and the network: an
/// actor that connects to "host:port" and answers the peer's node, its
/// published actor and the interface that actor publishes. CAF's middleman
/// actor speaks it (TCP and BASP); tests use an in-process directory.
using peer_connector = caf::typed_actor<
  caf::replies_to<caf::connect_atom, std::string, uint16_t>::with<
    caf::node_id, caf::strong_actor_ptr, std::set<std::string>>>;

} // namespace dsec

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::http_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dsec::gossip_packet_ptr)
