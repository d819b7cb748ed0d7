// Every atom of dsec's actor protocol, in one place (at most 10 characters
// each; CAF already defines get/put/ok/add/delete/join/tick/timeout/ping/pong).
#pragma once

#include <caf/atom.hpp>

namespace dsec {

using create_atom = caf::atom_constant<caf::atom("create")>;
using exec_atom = caf::atom_constant<caf::atom("exec")>;
using stream_atom = caf::atom_constant<caf::atom("stream")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using destroy_atom = caf::atom_constant<caf::atom("destroy")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using wfile_atom = caf::atom_constant<caf::atom("wfile")>;
using rfile_atom = caf::atom_constant<caf::atom("rfile")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using layers_atom = caf::atom_constant<caf::atom("layers")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
using http_atom = caf::atom_constant<caf::atom("http")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;
// A pause that keeps only the files (E2B's keepMemory false).
using pausefiles_atom = caf::atom_constant<caf::atom("pausefiles")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using network_atom = caf::atom_constant<caf::atom("network")>;
// PATCH /v1/sandboxes/{id}: cpu class and network of a running sandbox.
using update_atom = caf::atom_constant<caf::atom("update")>;
using fncall_atom = caf::atom_constant<caf::atom("fncall")>;
// Job-level pause/resume over a label selector (actors/job_ops.hpp).
using job_atom = caf::atom_constant<caf::atom("job")>;
// Processes in a sandbox: background execs, the process table, signals.
using bgexec_atom = caf::atom_constant<caf::atom("bgexec")>;
using procs_atom = caf::atom_constant<caf::atom("procs")>;
using proc_atom = caf::atom_constant<caf::atom("proc")>;
using signal_atom = caf::atom_constant<caf::atom("signal")>;
// E2B API (actors/e2b_*): filesystem operations and a new TTL.
using fsop_atom = caf::atom_constant<caf::atom("fsop")>;
using setttl_atom = caf::atom_constant<caf::atom("setttl")>;
using stdin_atom = caf::atom_constant<caf::atom("stdin")>;
// One sandbox's CPU and memory use now (E2B's GET /sandboxes/{id}/metrics).
using sbmetrics_atom = caf::atom_constant<caf::atom("sbmetrics")>;
// Layers: catalog entries and blobs between peers (image fetch).
using fetch_atom = caf::atom_constant<caf::atom("fetch")>;
using blob_atom = caf::atom_constant<caf::atom("blob")>;
// Cluster: membership view, routing, gossip.
using nodes_atom = caf::atom_constant<caf::atom("nodes")>;
using view_atom = caf::atom_constant<caf::atom("view")>;
using packet_atom = caf::atom_constant<caf::atom("packet")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
// Reclaim and measured memory (actors/reclaim.hpp).
using usage_atom = caf::atom_constant<caf::atom("usage")>;
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
// Trajectory log: read it, rebuild a sandbox from it, note a rebuild in the
// new sandbox's log (actors/sandbox_trajectory.hpp, sandbox_replay.hpp).
using traj_atom = caf::atom_constant<caf::atom("traj")>;
using replay_atom = caf::atom_constant<caf::atom("replay")>;
using rebuilt_atom = caf::atom_constant<caf::atom("rebuilt")>;
// INTERNAL: self-sent or sent by helper threads.
using start_atom = caf::atom_constant<caf::atom("start")>;
using cont_atom = caf::atom_constant<caf::atom("cont")>;
using ttl_atom = caf::atom_constant<caf::atom("ttl")>;
using state_atom = caf::atom_constant<caf::atom("state")>;
using gone_atom = caf::atom_constant<caf::atom("gone")>;
using died_atom = caf::atom_constant<caf::atom("died")>;
using pwait_atom = caf::atom_constant<caf::atom("pwait")>;
// INTERNAL: lifecycle -> sandbox after a reclaim pass (actors/sandbox_idle.hpp).
using idle_atom = caf::atom_constant<caf::atom("idle")>;
// -- push streams (issue 24 part 2): a background command's output and a
// directory's changes pushed to sinks (actors/sandbox_procs.hpp, sandbox_watch.hpp).
using follow_atom = caf::atom_constant<caf::atom("follow")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
// -- terminals (issue 26 part 1): actors/sandbox_pty.hpp.
using ptyopen_atom = caf::atom_constant<caf::atom("ptyopen")>;
using ptywrite_atom = caf::atom_constant<caf::atom("ptywrite")>;
using ptysize_atom = caf::atom_constant<caf::atom("ptysize")>;
// -- shell sessions (issue 26 part 2): open, run in, close and list a
// sandbox's long-lived shells (actors/sandbox_session.hpp).
using sopen_atom = caf::atom_constant<caf::atom("sopen")>;
using srun_atom = caf::atom_constant<caf::atom("srun")>;
using sclose_atom = caf::atom_constant<caf::atom("sclose")>;
using slist_atom = caf::atom_constant<caf::atom("slist")>;
// -- ports (issue 26 part 3): where a port inside a sandbox is served
// (actors/sandbox_ports.hpp, actors/gateway_ports.hpp).
using port_atom = caf::atom_constant<caf::atom("port")>;

} // namespace dsec
