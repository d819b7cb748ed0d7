// The operations on one sandbox, each declared once: its name, the atom and
// argument types of its message, its reply, how long a hop waits for it
// (core/clock.hpp), whether it resumes a paused sandbox and whether the
// trajectory log keeps it, and the few checks that differ per operation.
//
// Everything about routing an operation follows from its declaration:
//   - the rows of sandbox_api (atom, id, args... -> reply) and of
//     sandbox_actor (atom, args... -> reply) in actors/interfaces.hpp, so CAF
//     still type-checks every handler, request and delegate;
//   - placement's row, which stamps the request (at_front) and forwards it to
//     the owner with the op's peer deadline (actors/placement.cpp);
//   - lifecycle's row, which checks the arguments (check) and delegates to
//     the sandbox's actor (actors/lifecycle.cpp);
//   - the Python binding's dispatch by `name` (bindings/python/module.cpp)
//     and the native client's call (bindings/client/native_client.cpp).
// An operation whose routing truly differs sets `forwarded = false` and keeps
// hand-written rows in placement and lifecycle (info answers `lost`, destroy
// is idempotent on a lost node, cancel is fire-and-forget).
//
// Adding an operation: a struct here and its name in `sandbox_ops`, its
// handler in actors/sandbox.cpp (sandbox_handlers), its backend call if it
// needs one, its REST route, its SDK method, and tests (README, "Where to
// start reading").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/actor.hpp>
#include <caf/detail/type_list.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"
#include "core/clock.hpp"
#include "core/fs_entry.hpp"
#include "core/session.hpp"
#include "core/port_route.hpp"
#include "core/types.hpp"
#include "core/validate.hpp"

namespace dsec::ops {

using caf::detail::type_list;
using wait_bound = std::optional<std::chrono::milliseconds>;

/// What a hop waits for an answer: a plain call, and an exec on top of its
/// own limit. A node's hops take theirs from core/clock.hpp (waits_of); the
/// native client from its options.
struct waits {
  std::chrono::milliseconds call;
  std::chrono::milliseconds exec_slack;
};

/// The waits of hop `h` (core/clock.hpp: an outer hop waits longer).
constexpr waits waits_of(hop h) {
  return {call_wait(h), h == hop::peer ? exec_slack_inner : exec_slack_outer};
}

/// What an owner's check knows of its node.
struct node_limits {
  /// A file call moves at most this many bytes (node_config::max_file_bytes).
  uint64_t max_file_bytes = 0;
};

// -- the declaration every operation derives from ------------------------------

/// An operation answered with `Reply` (void: no answer) to a message
/// (Atom, Args...) about one sandbox. Defaults: a plain call bound
/// (call_wait), nothing stamped at the front door, nothing checked at the
/// owner, forwarded by the generic rows. A derived declaration overrides a
/// hook by declaring a static function of the same name.
template <class Atom, class Reply, class... Args>
struct op {
  using atom = Atom;
  using reply = Reply;
  using args = type_list<Args...>;
  /// Whether a call on a paused sandbox resumes it first (transparent resume).
  static constexpr bool resumes = false;
  /// Whether the sandbox's trajectory log keeps it.
  static constexpr bool logged = false;
  /// Whether placement and lifecycle route it by the generic rows.
  static constexpr bool forwarded = true;
  /// How long a hop with waits `w` waits for the answer; nullopt: as long as
  /// the caller lives.
  static wait_bound deadline(const waits& w, const Args&...) { return w.call; }
  /// At the front door that takes the call first (and again at the owner).
  static void at_front(Args&...) {}
  /// At the owner, before the sandbox's actor sees it: an error refuses the
  /// call; it may also narrow an argument to the node's limits.
  static error check(const node_limits&, const std::string&, Args&...) { return {}; }
};

// -- hooks shared by several operations ------------------------------------------

/// Stamps an exec with the time this node's front door took it (a forwarded
/// exec is stamped again by its owner).
inline void stamp(exec_request& req) {
  req.received_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
}

/// An exec waits for its own limit plus the hop's slack.
inline wait_bound exec_deadline(const waits& w, const exec_request& req) {
  return exec_wait(req.timeout_s, w.exec_slack);
}

/// A background exec is checked as an exec, and cannot carry a step key (a
/// step's result is what the log keeps; a background one has none yet).
inline error check_background(const exec_request& req) {
  if (auto valid = validate(req); !valid)
    return valid.err();
  if (!req.step.empty())
    return invalid_argument("exec: step cannot be combined with background");
  return {};
}

// -- the operations ----------------------------------------------------------------

/// The sandbox's info with live denial counts (`lost` from placement when
/// its node is gone). Hand-written rows.
struct info_op : op<info_atom, sandbox_info> {
  static constexpr const char* name = "info";
  static constexpr bool forwarded = false;
};

/// Destroys it; answers whether it existed (idempotent). Hand-written rows.
struct destroy_op : op<destroy_atom, bool> {
  static constexpr const char* name = "destroy";
  static constexpr bool forwarded = false;
};

/// Kills the exec started with `token`; no answer. Hand-written rows.
struct cancel_op : op<cancel_atom, void, uint64_t> {
  static constexpr const char* name = "cancel";
  static constexpr bool forwarded = false;
};

/// Runs a command (exec_request) to its end; `token` (uint64_t) lets cancel
/// kill it (0: not cancellable).
struct exec_op : op<exec_atom, exec_result, exec_request, uint64_t> {
  static constexpr const char* name = "exec";
  static constexpr bool resumes = true, logged = true;
  static wait_bound deadline(const waits& w, const exec_request& r, const uint64_t&) {
    return exec_deadline(w, r);
  }
  static void at_front(exec_request& r, uint64_t&) { stamp(r); }
  static error check(const node_limits&, const std::string&, exec_request& r, uint64_t&) {
    auto valid = validate(r);
    return valid ? error{} : valid.err();
  }
};

/// exec, and every chunk of output goes to the sink actor as
/// (stream_atom, token, exec_chunk) before the answer (actors/chunk_relay.hpp).
struct stream_op : op<stream_atom, exec_result, exec_request, caf::actor, uint64_t> {
  static constexpr const char* name = "exec_stream";
  static constexpr bool resumes = true, logged = true;
  static wait_bound deadline(const waits& w, const exec_request& r, const caf::actor&,
                             const uint64_t&) {
    return exec_deadline(w, r);
  }
  static void at_front(exec_request& r, caf::actor&, uint64_t&) { stamp(r); }
  static error check(const node_limits&, const std::string&, exec_request& r, caf::actor&,
                     uint64_t&) {
    auto valid = validate(r);
    return valid ? error{} : valid.err();
  }
};

/// Starts a background command; answers once init reported its pid.
struct bgexec_op : op<bgexec_atom, background_process, exec_request> {
  static constexpr const char* name = "exec_background";
  static constexpr bool resumes = true, logged = true; // its start and its end
  static void at_front(exec_request& r) { stamp(r); }
  static error check(const node_limits&, const std::string&, exec_request& r) {
    return check_background(r);
  }
};

/// The same, keeping its stdin open for stdin_op if the flag is set (E2B).
struct bgexec_stdin_op : op<bgexec_atom, background_process, exec_request, bool> {
  static constexpr const char* name = "exec_background_stdin";
  static constexpr bool resumes = true, logged = true;
  static void at_front(exec_request& r, bool&) { stamp(r); }
  static error check(const node_limits&, const std::string&, exec_request& r, bool&) {
    return check_background(r);
  }
};

/// More input for background process pid (int32_t); closes it if the flag is set.
struct stdin_op : op<stdin_atom, bool, int32_t, std::string, bool> {
  static constexpr const char* name = "send_stdin";
  static constexpr bool resumes = true;
};

/// Every process in the sandbox.
struct procs_op : op<procs_atom, std::vector<process_info>> {
  static constexpr const char* name = "processes";
  static constexpr bool resumes = true;
};

/// A background process (pid) with its output so far, waiting up to wait_ms
/// (int64_t) for its end: the hops wait that long more.
struct proc_op : op<proc_atom, background_process, int32_t, int64_t> {
  static constexpr const char* name = "process";
  static wait_bound deadline(const waits& w, const int32_t&, const int64_t& wait_ms) {
    return w.call + std::chrono::milliseconds{std::max<int64_t>(wait_ms, 0)};
  }
};

/// Signals process pid with signo (its group if the flag is set).
struct signal_op : op<signal_atom, bool, int32_t, int32_t, bool> {
  static constexpr const char* name = "signal_process";
  static constexpr bool resumes = true;
};

/// Writes (path, data); refused past the node's file limit.
struct wfile_op : op<wfile_atom, bool, std::string, std::string> {
  static constexpr const char* name = "write_file";
  static constexpr bool resumes = true, logged = true;
  static error check(const node_limits& lim, const std::string& id, std::string& path,
                     std::string& data) {
    if (data.size() <= lim.max_file_bytes)
      return {};
    return too_large("write " + path + " in sandbox " + id + ": " + std::to_string(data.size())
                     + " bytes, over the node's limit of " + std::to_string(lim.max_file_bytes));
  }
};

/// Reads path, at most max_bytes (too_large past it); a caller may ask for
/// less than the node's limit, never more.
struct rfile_op : op<rfile_atom, std::string, std::string, uint64_t> {
  static constexpr const char* name = "read_file";
  static constexpr bool resumes = true;
  static error check(const node_limits& lim, const std::string&, std::string&,
                     uint64_t& max_bytes) {
    max_bytes = std::min<uint64_t>(max_bytes, lim.max_file_bytes);
    return {};
  }
};

/// E2B filesystem calls: (op, path, to, depth), op one of stat, list, mkdir,
/// move, remove.
struct fsop_op : op<fsop_atom, std::vector<fs_entry>, std::string, std::string, std::string,
                    int32_t> {
  static constexpr const char* name = "file_op";
  static constexpr bool resumes = true;
};

/// A new TTL from now, seconds (0: never).
struct setttl_op : op<setttl_atom, sandbox_info, int64_t> {
  static constexpr const char* name = "set_ttl";
};

/// Pause and resume; both idempotent.
struct pause_op : op<pause_atom, sandbox_info> {
  static constexpr const char* name = "pause";
};
/// A pause that keeps only the files: the processes and memory go, the
/// resume boots the sandbox again on its files (E2B's keepMemory false).
struct pause_files_op : op<pausefiles_atom, sandbox_info> {
  static constexpr const char* name = "pause_files";
};
struct resume_op : op<resume_atom, sandbox_info> {
  static constexpr const char* name = "resume";
};

/// The sandbox's changes as a new layer (name, version; empty: the node's
/// snapshot/<id>@<unix ms>).
struct snapshot_op : op<snapshot_atom, snapshot_info, std::string, std::string> {
  static constexpr const char* name = "snapshot";
  static constexpr bool resumes = true;
};

/// Replaces the network allow-list.
struct network_op : op<network_atom, bool, network_policy> {
  static constexpr const char* name = "set_network";
  static constexpr bool resumes = true;
  static error check(const node_limits&, const std::string&, network_policy& p) {
    auto valid = validate(p);
    return valid ? error{} : valid.err();
  }
};

/// PATCH: the CPU class if not empty, then the policy if the flag is set.
struct update_op : op<update_atom, sandbox_info, std::string, bool, network_policy> {
  static constexpr const char* name = "update";
  static constexpr bool resumes = true;
  static error check(const node_limits&, const std::string& id, std::string& cpu_class,
                     bool& set_network, network_policy& p) {
    if (cpu_class.empty() && !set_network)
      return invalid_argument("update " + id + ": nothing to change");
    if (!cpu_class.empty())
      if (auto valid = validate_cpu_class(cpu_class); !valid)
        return valid.err();
    if (set_network)
      if (auto valid = validate(p); !valid)
        return valid.err();
    return {};
  }
};

/// Notes in the log that the sandbox was rebuilt from source's log up to
/// seq upto (actors/sandbox_replay.hpp).
struct rebuilt_op : op<rebuilt_atom, bool, std::string, uint64_t> {
  static constexpr const char* name = "rebuilt";
  static constexpr bool logged = true;
};

/// What the sandbox uses now: CPU (since the last sample) and memory of its
/// cgroup (E2B's GET /sandboxes/{id}/metrics).
struct sbmetrics_op : op<sbmetrics_atom, sandbox_metric> {
  static constexpr const char* name = "metrics";
};

/// Subscribes `sink` (caf::actor) to background process pid's output
/// (actors/chunk_relay.hpp: a subscribed_stream chunk, what it printed
/// before as far as the sandbox keeps it, then live output, tagged token);
/// answered when the command ends, with its exit status and no output (all
/// of it went to the sink), or as it stands when the sink goes down. The
/// hops wait as long as the stream lasts: a dead owner fails it at once.
struct follow_op : op<follow_atom, background_process, int32_t, caf::actor, uint64_t> {
  static constexpr const char* name = "follow";
  // A paused command's output is read as it stands (sandbox_procs.hpp).
  static wait_bound deadline(const waits&, const int32_t&, const caf::actor&, const uint64_t&) {
    return std::nullopt;
  }
};

/// Subscribes `sink` to the changes under directory path (recursive if the
/// flag is set), as watch_event_stream chunks; answered true when the sink
/// goes down, an error when the directory or the sandbox goes away. Waited
/// for as long as it lasts, like follow.
struct watch_op : op<watch_atom, bool, std::string, bool, caf::actor, uint64_t> {
  static constexpr const char* name = "watch";
  static constexpr bool resumes = true;
  static wait_bound deadline(const waits&, const std::string&, const bool&, const caf::actor&,
                             const uint64_t&) {
    return std::nullopt;
  }
};

// -- terminals (issue 26 part 1; actors/sandbox_pty.hpp) ------------------------

/// Why (cols, rows) is not a terminal size for operation `what`, or none.
inline error check_pty_size(const char* what, const std::string& id, int32_t cols,
                            int32_t rows) {
  if (cols >= 1 && cols <= 1000 && rows >= 1 && rows <= 1000)
    return {};
  return invalid_argument(std::string(what) + " in sandbox " + id + ": cols and rows must be "
                          "1..1000, got " + std::to_string(cols) + "x" + std::to_string(rows));
}

/// Opens a terminal: runs the request (empty argv: the user's login shell)
/// on a new pty of cols x rows (int32_t, int32_t); answers once init
/// reported its pid. Its output, wait and kill are a background command's
/// (follow_op with stream 4, proc_op, signal_op).
struct pty_open_op : op<ptyopen_atom, background_process, exec_request, int32_t, int32_t> {
  static constexpr const char* name = "pty_open";
  static constexpr bool resumes = true;
  static void at_front(exec_request& r, int32_t&, int32_t&) { stamp(r); }
  static error check(const node_limits&, const std::string& id, exec_request& r, int32_t& cols,
                     int32_t& rows) {
    if (auto e = check_pty_size("open terminal", id, cols, rows))
      return e;
    if (r.argv.empty()) { // the login shell: check the rest as an exec
      auto probe = r;
      probe.argv = {"sh"};
      return check_background(probe);
    }
    return check_background(r);
  }
};

/// Types bytes at terminal pid (int32_t): not_found if it is none, conflict
/// once it exited.
struct pty_write_op : op<ptywrite_atom, bool, int32_t, std::string> {
  static constexpr const char* name = "pty_write";
  static constexpr bool resumes = true;
};

/// Resizes terminal pid to cols x rows (int32_t each).
struct pty_resize_op : op<ptysize_atom, bool, int32_t, int32_t, int32_t> {
  static constexpr const char* name = "pty_resize";
  static constexpr bool resumes = true;
  static error check(const node_limits&, const std::string& id, int32_t&, int32_t& cols,
                     int32_t& rows) {
    return check_pty_size("resize terminal", id, cols, rows);
  }
};

// -- shell sessions (issue 26 part 2; actors/sandbox_session.hpp) ----------------

/// How long a session run may take past its timeout_s: SIGINT at the
/// timeout, again each second, the shell killed at this (the session ends).
constexpr std::chrono::milliseconds session_stop_grace{3000};

/// Opens a shell session (shell, cwd, env); answers it once the shell runs.
/// An empty shell is /bin/bash; a shell the sandbox lacks is invalid_argument.
struct session_open_op : op<sopen_atom, session_info, std::string, std::string,
                            std::map<std::string, std::string>> {
  static constexpr const char* name = "session_open";
  static constexpr bool resumes = true, logged = true;
  static error check(const node_limits&, const std::string& id, std::string& shell,
                     std::string& cwd, std::map<std::string, std::string>&) {
    if (shell.empty())
      shell = "/bin/bash";
    if (shell.front() != '/' || shell.size() > 4096 || shell.find('\0') != std::string::npos)
      return invalid_argument("session open in sandbox " + id + ": shell \"" + shell.substr(0, 200)
                              + "\" must be an absolute path");
    if (!cwd.empty() && cwd.front() != '/')
      return invalid_argument("session open in sandbox " + id + ": cwd \"" + cwd.substr(0, 200)
                              + "\" must be an absolute path");
    return {};
  }
};

/// Runs (session id, command, timeout_s) in the session's shell; answered
/// with the command's exit status and output, cut exactly (core/session.hpp).
struct session_run_op : op<srun_atom, exec_result, std::string, std::string, double> {
  static constexpr const char* name = "session_run";
  static constexpr bool resumes = true, logged = true;
  static wait_bound deadline(const waits& w, const std::string&, const std::string&,
                             const double& timeout_s) {
    auto bound = exec_wait(timeout_s, w.exec_slack);
    if (bound)
      *bound += session_stop_grace;
    return bound;
  }
  static error check(const node_limits&, const std::string& id, std::string& sid,
                     std::string& cmd, double& timeout_s) {
    if (auto why = session_text::check_cmd(cmd); !why.empty())
      return error{cmd.size() > session_text::max_cmd ? errc::too_large : errc::invalid_argument,
                   "session run in " + sid + " of sandbox " + id + ": " + why};
    if (!(timeout_s >= 0) || timeout_s > 1e7)
      return invalid_argument("session run in " + sid + " of sandbox " + id
                              + ": timeout_s must be a number >= 0");
    return {};
  }
};

/// Ends a session (its shell and every job it started); not_found for a
/// session the sandbox does not have (or had and closed).
struct session_close_op : op<sclose_atom, bool, std::string> {
  static constexpr const char* name = "session_close";
  static constexpr bool resumes = true, logged = true;
};

/// The sandbox's sessions.
struct session_list_op : op<slist_atom, std::vector<session_info>> {
  static constexpr const char* name = "session_list";
};

/// Where TCP port (int32_t, 1..65535) inside the sandbox is served
/// (core/port_route.hpp); a paused sandbox is resumed first, since a request
/// to the port follows (actors/gateway_ports.hpp).
struct port_op : op<port_atom, port_route, int32_t> {
  static constexpr const char* name = "port";
  static constexpr bool resumes = true;
  static error check(const node_limits&, const std::string& id, int32_t& port) {
    if (port >= 1 && port <= 65535)
      return {};
    return invalid_argument("port " + std::to_string(port) + " of sandbox " + id
                            + ": must be between 1 and 65535");
  }
};

/// Every operation on one sandbox. One line per operation.
using sandbox_ops = type_list<info_op, destroy_op, cancel_op, exec_op, stream_op, bgexec_op,
                              bgexec_stdin_op, stdin_op, procs_op, proc_op, signal_op, wfile_op,
                              rfile_op, fsop_op, setttl_op, pause_op, pause_files_op, resume_op,
                              snapshot_op,
                              network_op, update_op, rebuilt_op, sbmetrics_op, follow_op,
                              watch_op,
                              pty_open_op, pty_write_op, pty_resize_op,
                              session_open_op, session_run_op, session_close_op, session_list_op,
                              port_op>;

// -- deriving interface rows and lists ---------------------------------------------

/// The concatenation of type lists.
template <class... Lists>
struct concat;
template <>
struct concat<> {
  using type = type_list<>;
};
template <class... Ts>
struct concat<type_list<Ts...>> {
  using type = type_list<Ts...>;
};
template <class... Ts, class... Us, class... Rest>
struct concat<type_list<Ts...>, type_list<Us...>, Rest...>
  : concat<type_list<Ts..., Us...>, Rest...> {};
template <class... Lists>
using concat_t = typename concat<Lists...>::type;

/// The operations of `List` that the generic rows forward.
template <class List>
struct forwarded_of;
template <class... Ops>
struct forwarded_of<type_list<Ops...>> {
  using type = concat_t<std::conditional_t<Ops::forwarded, type_list<Ops>, type_list<>>...>;
};
using forwarded_ops = typename forwarded_of<sandbox_ops>::type;

/// The interface row of `Op`, with `Prefix` (the sandbox id, or nothing)
/// before its arguments; a void reply makes a reacts_to row.
template <class Op, class Prefix, class Args = typename Op::args>
struct row;
template <class Op, class... Pre, class... Args>
struct row<Op, type_list<Pre...>, type_list<Args...>> {
  using type = typename caf::replies_to<typename Op::atom, Pre..., Args...>::template with<
    typename Op::reply>;
};

/// The rows of every operation in `List`.
template <class List, class Prefix>
struct rows;
template <class... Ops, class Prefix>
struct rows<type_list<Ops...>, Prefix> {
  using type = type_list<typename row<Ops, Prefix>::type...>;
};

/// Prefixes: the per-sandbox rows of the front doors take the id first.
using with_id = type_list<std::string>;
using without_id = type_list<>;

/// A typed actor handle with the rows of `List`.
template <class List>
struct typed_actor_of;
template <class... Rows>
struct typed_actor_of<type_list<Rows...>> {
  using type = caf::typed_actor<Rows...>;
};

/// The handle of the rows of `sandbox_ops` (with `Prefix`) and `Extra...`.
template <class Prefix, class... Extra>
using sandbox_handle =
  typename typed_actor_of<concat_t<typename rows<sandbox_ops, Prefix>::type,
                                   type_list<Extra...>>>::type;

} // namespace dsec::ops
