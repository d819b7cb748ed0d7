// The shared vocabulary of dsec: sandbox specs, states, exec requests and
// results, sandbox and layer descriptions. Plain structs with no behaviour, used
// by backends, layers, actors, the gateway and the bindings alike.
//
// These structs cross actor (and, with the native protocol, process)
// boundaries: `core/inspect.hpp` gives each an inspect() overload. Fields are
// append only. A field of sandbox_spec or sandbox_info (or of their policies
// and denial counts) is also added to its list in core/spec_fields.hpp, which
// gives it its wire place, JSON and Python names and spec equality.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsec {

/// Lifecycle states (drawn in actors/lifecycle.hpp). Wire values: append only.
enum class sandbox_state : uint8_t {
  creating = 0,
  running = 1,
  paused = 2,
  stopped = 3,
  failed = 4,
  lost = 5,
};

/// "creating", "running", ...
const char* to_string(sandbox_state s);

/// Network policy of one sandbox. Empty `allow` = loopback only (mode "none").
struct network_policy {
  /// "host:port", "cidr:port" or "domain:port" entries.
  std::vector<std::string> allow;
  /// "host:port" or "cidr:port" entries closed although `allow` opens them
  /// through a catch-all (0.0.0.0/0, ::/0): every other allow entry wins
  /// over a deny, as E2B's allowOut wins over denyOut
  /// (backends/net/deny_list.hpp).
  std::vector<std::string> deny;
};

/// Paths inside the sandbox that the agent may read but not change, or not see.
struct protect_policy {
  std::vector<std::string> readonly;
  std::vector<std::string> hidden;
};

/// What a caller asks for. Defaults are the values a spec without the field gets.
struct sandbox_spec {
  /// "container" | "microvm" | "vm" | "fncall".
  std::string backend = "container";
  /// Layer refs, `name@version`, first = bottom. At least one, unless
  /// `image` names the bottom.
  std::vector<std::string> layers;
  /// CPU cores, may be fractional; 0 means no quota (shares only).
  double cpu = 1.0;
  /// Memory limit in MiB. 512 fits a python agent with headroom.
  int64_t memory_mb = 512;
  /// Writable upper size in MiB (quota enforced where the backend can).
  int64_t disk_mb = 1024;
  /// Maximum number of tasks (fork bomb guard).
  int64_t pids = 512;
  /// Time to live in seconds; the node destroys the sandbox after it. 0 = none.
  int64_t ttl_s = 3600;
  network_policy network;
  protect_policy protect;
  /// Environment every exec starts with (exec env overrides it).
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> labels;
  /// "latency" | "batch".
  std::string cpu_class = "latency";
  /// Pin to one node id; empty = any.
  std::string node;
  /// Idempotency key; empty = none.
  std::string request_id;
  /// Longest a paused sandbox is kept, in seconds: past it the node destroys
  /// it (logged), so a job that never comes back leaks nothing. Its TTL
  /// (ttl_s, running time) stands still while paused. Default 24 h: long
  /// enough for a preempted job to wait out a night's queue; it fails toward
  /// destroying (a job paused longer has to rebuild its sandboxes).
  int64_t paused_ttl_s = 86400;
  /// An image reference (`host:port/repo:tag`, `repo@sha256:..`,
  /// core/image_reference.hpp) the sandbox starts from, below `layers`;
  /// empty = none. The node that creates the sandbox resolves it to a layer
  /// (pulling it the first time, registry/image_resolver.hpp); once it runs,
  /// that layer ref is the first of its `layers`.
  std::string image;
  // -- what ends a sandbox besides a destroy (actors/sandbox_idle.hpp) -------
  /// What the end of ttl_s does: "destroy" (default) or "pause" (E2B's
  /// lifecycle.onTimeout "pause"). A sandbox paused by it gets a whole ttl_s
  /// again when it resumes.
  std::string on_timeout = "destroy";
  /// Seconds without a call (none in flight, none arriving) and without CPU
  /// use after which on_idle happens (DSec's ttl_running_stop); 0 = never.
  int64_t idle_timeout_s = 0;
  /// "pause" (default) or "destroy".
  std::string on_idle = "pause";
  /// Whether a call on a paused sandbox resumes it first (default, the
  /// transparent resume) or fails as unavailable until an explicit resume
  /// (E2B without lifecycle.autoResume).
  bool auto_resume = true;
};

/// Hard limits on a spec, checked by validate().
struct spec_limits {
  static constexpr double max_cpu = 256;
  static constexpr int64_t max_memory_mb = 1 << 20;   // 1 TiB
  static constexpr int64_t min_memory_mb = 8;          // below this init cannot start
  static constexpr int64_t max_disk_mb = 1 << 22;      // 4 TiB
  static constexpr int64_t max_pids = 1 << 20;
  static constexpr int64_t max_ttl_s = 30 * 24 * 3600; // 30 days
  static constexpr int64_t max_paused_ttl_s = 30 * 24 * 3600; // 30 days, as ttl_s
  static constexpr size_t max_layers = 128;
  static constexpr size_t max_labels = 64;
  static constexpr size_t max_env = 1024;
  static constexpr size_t max_string = 4096;
};

/// One command to run inside a sandbox.
struct exec_request {
  /// argv; a `cmd` string is turned into {"/bin/sh", "-c", cmd} by the codec.
  std::vector<std::string> argv;
  /// Working directory inside the sandbox; empty = "/".
  std::string cwd;
  std::map<std::string, std::string> env;
  /// Bytes fed to stdin, then stdin is closed.
  std::string stdin_data;
  /// Kill the command after this many seconds; 0 = no timeout.
  double timeout_s = 0;
  /// INTERNAL: when the owner node's front door (placement) took the request,
  /// steady clock ns; exec_result::node_ms counts from here. Set by the node,
  /// whatever a client sends.
  int64_t received_ns = 0;
  /// Step key for fast-forward (core/trajectory.hpp): unique within the
  /// sandbox; a step the log holds is answered from it. Empty = none.
  std::string step;
  /// Who runs it: a user name (looked up in the sandbox's own /etc/passwd),
  /// "uid" or "uid:gid"; empty = the sandbox's default (its layers' USER),
  /// else root.
  std::string user;
};

/// The outcome of an exec.
struct exec_result {
  /// Exit status, or 128 + signal number when killed by a signal.
  int32_t exit_code = 0;
  std::string stdout_data;
  std::string stderr_data;
  bool timed_out = false;
  /// Wall time from start to exit, measured inside the sandbox.
  double duration_ms = 0;
  /// True when output beyond the per-stream cap was dropped.
  bool truncated = false;
  /// Time the owner node spent on the exec, from its front door (placement)
  /// taking the request to the sandbox actor's answer: what a client's round
  /// trip is compared against.
  double node_ms = 0;
  /// True when the answer came from the trajectory log (a step run before),
  /// not from running the command again.
  bool replayed = false;
};

/// One process inside a sandbox (GET /v1/sandboxes/{id}/processes), as the
/// sandbox's init reads it from /proc.
struct process_info {
  /// The pid inside the sandbox (what `echo $$` there prints).
  int32_t pid = 0;
  int32_t ppid = 0;
  /// The command line; empty for a zombie (then `name` is all there is).
  std::vector<std::string> argv;
  /// The kernel's short name of the process (comm, at most 15 bytes).
  std::string name;
  /// The state letter of /proc/<pid>/stat: R running, S sleeping, D disk
  /// wait, Z zombie, T stopped, ...
  std::string state;
  /// Unix time in milliseconds.
  int64_t started_at_ms = 0;
  /// True if it is the command of a background exec.
  bool background = false;
};

/// A command started by a background exec (POST .../exec?background=1,
/// sb.exec(cmd, background=True)): running, or finished and kept (the
/// sandbox keeps the last 64 finished ones).
struct background_process {
  int32_t pid = 0;
  std::vector<std::string> argv;
  /// Unix time in milliseconds.
  int64_t started_at_ms = 0;
  bool running = true;
  /// Output so far (at most 16 MiB per stream, then `truncated`) and, once
  /// it is not running, exit code, timed_out and duration.
  exec_result result;
};

/// A chunk of exec output for streaming. stream: 1 = stdout, 2 = stderr.
struct exec_chunk {
  int32_t stream = 1;
  std::string data;
};

/// POST /v1/fncall: run one short program in a fresh process from a warm
/// pool (SandboxFusion's run_code). Answered with an exec_result.
struct fncall_request {
  /// "python" | "bash".
  std::string language;
  std::string code;
  std::string stdin_data;
  double timeout_s = 10;
  /// Files written before the call, relative or absolute path -> content;
  /// gone after it.
  std::map<std::string, std::string> files;
};

/// The answer of POST /v1/sandboxes/{id}/snapshot: a new layer holding the
/// sandbox's changes, to stack on its layers when creating branches.
struct snapshot_info {
  /// The snapshot layer's ref (`snapshot/<sandbox id>@<n>` unless named).
  std::string ref;
  std::string digest;
  /// The layers to create a branch from: the source's layers + ref.
  std::vector<std::string> layers;
  int64_t size_bytes = 0;
  double duration_ms = 0;
};

/// Security events of one sandbox: what it tried and was refused. A trainer
/// reads them to penalise reward hacking.
struct denial_counts {
  /// Refused connects and sends (eBPF allow-list).
  int64_t network = 0;
  /// Refused system calls (seccomp).
  int64_t syscall = 0;
  /// Refused writes to read-only or protected files.
  int64_t file = 0;
  /// The last few denied targets, newest last ("net 1.2.3.4:443",
  /// "syscall mount", "file /usr/bin/python3"); at most 16.
  std::vector<std::string> recent;
};

/// What the node measured of one sandbox at one moment (its cgroup
/// counters; for a VM, its QEMU process). Reclaim, admission and /metrics
/// read it.
struct usage_sample {
  /// Memory the sandbox holds in RAM now (anonymous + page cache charged to
  /// it), bytes.
  int64_t resident_bytes = 0;
  /// Of its memory, what sits in the node's compressed swap, bytes.
  int64_t swap_bytes = 0;
  /// CPU time used since it started, all of its processes, nanoseconds.
  int64_t cpu_ns = 0;
};

/// One sample of what a sandbox uses (GET /v1/sandboxes/{id}/metrics, E2B's
/// SandboxMetric): its cgroup's CPU time and memory.
struct sandbox_metric {
  /// When it was taken, Unix ms.
  int64_t timestamp_ms = 0;
  /// CPUs the sandbox may use (its spec's cpu, rounded up).
  int64_t cpu_count = 0;
  /// CPU used since the previous sample (or since the sandbox started), in
  /// percent of cpu_count CPUs.
  double cpu_used_pct = 0;
  /// Memory in RAM charged to it now, and its limit, bytes.
  int64_t mem_used = 0;
  int64_t mem_total = 0;
};

/// What GET /v1/sandboxes/{id} returns.
struct sandbox_info {
  std::string id;
  std::string node;
  sandbox_state state = sandbox_state::creating;
  std::string backend;
  std::vector<std::string> layers;
  std::map<std::string, std::string> labels;
  /// Unix time in milliseconds.
  int64_t created_at_ms = 0;
  /// Unix time in milliseconds; 0 = never.
  int64_t expires_at_ms = 0;
  /// Why the sandbox failed ("oom", "init exited: ..."), empty otherwise.
  std::string reason;
  double cpu = 0;
  int64_t memory_mb = 0;
  int64_t disk_mb = 0;
  /// Filled by info (GET one sandbox); empty in lists.
  denial_counts denials;
  // -- measured memory (the reclaim actor's last sample; 0 before it) -------
  /// Bytes in RAM now (usage_sample::resident_bytes).
  int64_t resident_bytes = 0;
  /// Bytes in the node's compressed swap.
  int64_t swap_bytes = 0;
  /// Bytes the node's reclaim pushed out of RAM, in total.
  int64_t reclaimed_bytes = 0;
  /// Unix ms since which it used no CPU; 0 = busy (or not measured).
  int64_t idle_since_ms = 0;
  /// "latency" | "batch": the CPU class it runs in now (set at create,
  /// changed by PATCH /v1/sandboxes/{id}).
  std::string cpu_class = "latency";
  // -- TTL over pauses (actors/sandbox_ttl.hpp, core/ttl.hpp) ----------------
  /// The spec's ttl_s (running time; 0 = none) and paused_ttl_s.
  int64_t ttl_s = 0;
  int64_t paused_ttl_s = 0;
  /// While paused: the running time its TTL has left, ms (expires_at_ms is
  /// 0 then: the TTL stands still). Unused otherwise.
  int64_t ttl_left_ms = 0;
  /// While paused: when the node destroys it unless resumed (pause time +
  /// paused_ttl_s), Unix ms; 0 otherwise.
  int64_t paused_expires_at_ms = 0;
  /// The spec's image reference (empty = none). Once created, `layers`
  /// begins with the layer ref it resolved to.
  std::string image;
  /// The spec's on_timeout, idle_timeout_s, on_idle and auto_resume.
  std::string on_timeout = "destroy";
  int64_t idle_timeout_s = 0;
  std::string on_idle = "pause";
  bool auto_resume = true;
};

/// A layer in the store catalog.
/// What a layer sets for the commands run over it: an image's config (Env,
/// WorkingDir, User) or a Dockerfile's ENV, WORKDIR and USER. The topmost
/// layer that sets a field wins; a spec's env and an exec's own env, cwd
/// and user win over all of them.
struct layer_config {
  std::map<std::string, std::string> env;
  /// Absolute path; empty: not set.
  std::string workdir;
  /// "name", "uid" or "uid:gid"; empty: not set.
  std::string user;
  /// A command the sandbox runs in the background from its start (as a
  /// Dockerfile's CMD would: a layer's server, e.g. the code interpreter on
  /// port 49999); argv, empty: none. The topmost layer that sets it wins.
  std::vector<std::string> start;
};

struct layer_info {
  /// `name@version`.
  std::string ref;
  std::string name;
  std::string version;
  /// "base" | "workspace" | "toolkit" | "snapshot".
  std::string kind;
  /// "sha256:<hex>" of the EROFS image.
  std::string digest;
  int64_t size_bytes = 0;
  int64_t created_at_ms = 0;
  /// Exec defaults (see layer_config); not part of the digest.
  layer_config config;
};

/// One backend as a node reports it (GET /healthz "backends").
struct backend_status {
  /// "container", "microvm", "vm", "fncall".
  std::string name;
  /// A create with this backend can succeed on this node now.
  bool available = false;
  /// Why not (empty when available).
  std::string reason;
  /// microvm and vm: the guests' accelerator, "kvm" | "tcg", or "probing"
  /// while the node still finds out (creates wait for it); empty for the
  /// others.
  std::string accel;
  /// Why that accelerator ("kvm probe booted to the kernel panic in 0.31 s",
  /// "no /dev/kvm", "DSEC_VM_ACCEL=tcg", ...).
  std::string accel_reason;
};

/// Health and counts of one node, for /healthz and /metrics.
struct node_status {
  std::string node_id;
  std::string version;
  int64_t sandboxes = 0;
  int64_t creating = 0;
  int64_t uptime_ms = 0;
  int64_t creates_total = 0;
  int64_t create_failures_total = 0;
  int64_t destroys_total = 0;
  int64_t execs_total = 0;
  /// Host pid of the node process (benchmarks measure its memory).
  int64_t pid = 0;
  /// Layer refs in use by this node's sandboxes or held in its store
  /// (bounded): placement's locality hint and image fetch's holders.
  std::vector<std::string> layers;
  /// Every backend name this node knows, available or not (appended).
  std::vector<backend_status> backends;
  // -- measured memory (the reclaim actor's last sample) ----------------------
  /// Sum of the sandboxes' resident and swapped bytes.
  int64_t resident_bytes = 0;
  int64_t swap_bytes = 0;
  /// Bytes reclaim pushed out of this node's sandboxes since it started.
  int64_t reclaimed_bytes_total = 0;
  /// Sandboxes idle past the reclaim threshold.
  int64_t idle_sandboxes = 0;
  /// The host's MemAvailable at the last sample, MiB (-1 = not measured).
  int64_t memory_available_mb = -1;
  /// What new sandboxes can still get here, MiB: MemAvailable minus creates
  /// admitted since the sample minus the headroom (-1 = not measured). The
  /// figure admission decides by and gossip reports as free_memory_mb.
  int64_t memory_free_mb = -1;
};

/// One cluster member as a node's gossip view shows it (GET /v1/nodes,
/// c.nodes()), with its last load report.
struct member_info {
  std::string id;
  /// "host:port": the member's native (TCP) and gossip (UDP) endpoint.
  std::string address;
  /// "alive" | "suspect" | "dead" | "left".
  std::string state;
  uint64_t incarnation = 0;
  /// Measured free memory in MiB: what the member's admission still gives
  /// new sandboxes (MemAvailable less headroom and creates since the sample,
  /// node_status::memory_free_mb).
  int64_t free_memory_mb = 0;
  /// 1-minute load average per core (1.0 = saturated).
  double cpu_load = 0;
  int64_t sandboxes = 0;
  int64_t creating = 0;
  /// False while the member drains (takes no new sandboxes).
  bool accepting = true;
  /// Layer refs the member has mounted (bounded list).
  std::vector<std::string> layers;
};

} // namespace dsec
