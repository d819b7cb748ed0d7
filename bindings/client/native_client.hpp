// The native client: one connection from any program (the Python module, the
// SDK benchmark) to a node's front door (its placement actor) over CAF's binary protocol
// (BASP), the same messages a peer node sends (actors/interfaces.hpp).
//
// Every call is asynchronous: it takes a completion callback, which runs on a
// CAF thread exactly once, with the value or an error. Callbacks must be quick
// and must not block (the Python module only queues the result and wakes its
// waiter). `wait()` turns a call into a blocking one for callers that are not
// CAF threads.
//
// A node that goes away fails every call in flight with `unavailable` at once
// (CAF's down message on the closed connection, or the heartbeat timeout of a
// silent one); the next call reconnects. This header is free of CAF so the
// Python module compiles quickly.
//
// Fork-safe: a forked child makes its own runtime on its first call, and a
// connection it inherited reconnects to the same address then. Calls that were
// in flight at the fork answer in the parent only (fork.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/job.hpp"
#include "core/session.hpp"
#include "core/port_route.hpp"
#include "core/types.hpp"

namespace dsec::client {

/// Completion of one call; runs once, on a CAF thread.
template <class T>
using done_fn = std::function<void(expected<T>)>;

/// Receives streamed exec output, on a CAF thread, in order, before `done`.
using chunk_fn = std::function<void(exec_chunk)>;

/// Tunables of a connection.
struct options {
  /// Bound on connecting (and reconnecting) to the node.
  std::chrono::milliseconds connect_timeout = connect_wait_front;
  /// Bound on every call except exec: the SDK calls the front door, so this is
  /// the longest front-hop wait (a create walking its candidates,
  /// core/clock.hpp); a dead node fails calls at once anyway.
  std::chrono::milliseconds call_timeout = create_wait(hop::front);
  /// Added to an exec's own timeout_s (the node kills the command at timeout_s
  /// and still has to answer, maybe from a peer): the front hop's slack, so
  /// the node's own error arrives first. Execs without a timeout wait as long
  /// as the connection lives.
  std::chrono::milliseconds exec_slack = exec_slack_outer;
};

class connection;
using connection_ptr = std::shared_ptr<connection>;

/// One connection to one node. Thread-safe: any number of threads may call.
class connection {
 public:
  // -- construction ---------------------------------------------------------

  /// Connects to `addr` ("host:port", the node's --listen). Blocks the calling
  /// thread up to options::connect_timeout.
  [[nodiscard]] static expected<connection_ptr> open(const std::string& addr,
                                                     options opts = {});

  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// The address given to open().
  [[nodiscard]] const std::string& address() const;

  /// Closes the connection: calls in flight fail with `unavailable`, later
  /// calls too. Idempotent.
  void close();

  // -- calls (actors/interfaces.hpp, placement_actor) -----------------------

  void create(sandbox_spec spec, done_fn<sandbox_info> done);
  void info(std::string id, done_fn<sandbox_info> done);
  void list(std::map<std::string, std::string> labels, done_fn<std::vector<sandbox_info>> done);
  /// Answers true if the sandbox existed, false if it was already gone.
  void destroy(std::string id, done_fn<bool> done);
  /// `token` (new_token()) lets cancel() kill the command; 0 = not cancellable.
  void exec(std::string id, exec_request req, uint64_t token, done_fn<exec_result> done);
  void exec_stream(std::string id, exec_request req, uint64_t token, chunk_fn chunk,
                   done_fn<exec_result> done);
  /// Follows background process `pid` (ops::follow_op): `chunk` gets what it
  /// printed, first what the node kept, then live output (pushed, never
  /// polled); `done` its end, with no output (all of it went to `chunk`).
  void follow(std::string id, int32_t pid, chunk_fn chunk, done_fn<background_process> done);
  /// Kills a running exec; no answer.
  void cancel(std::string id, uint64_t token);
  void write_file(std::string id, std::string path, std::string data, done_fn<bool> done);
  /// Fails with too_large past `max_bytes`.
  void read_file(std::string id, std::string path, uint64_t max_bytes,
                 done_fn<std::string> done);
  void status(done_fn<node_status> done);
  void layers(done_fn<std::vector<layer_info>> done);
  /// The cluster as the node's gossip sees it (itself first).
  void nodes(done_fn<std::vector<member_info>> done);
  void pause(std::string id, done_fn<sandbox_info> done);
  /// A pause that keeps only the files; the resume boots the sandbox again.
  void pause_files(std::string id, done_fn<sandbox_info> done);
  void resume(std::string id, done_fn<sandbox_info> done);
  /// Empty name/version: the node picks `snapshot/<id>@<ms>`.
  void snapshot(std::string id, std::string name, std::string version,
                done_fn<snapshot_info> done);
  void set_network(std::string id, network_policy policy, done_fn<bool> done);
  /// PATCH: `cpu_class` ("latency" | "batch", empty = unchanged), then the
  /// policy if `set_network`; answers the sandbox info after it.
  void update(std::string id, std::string cpu_class, bool set_network, network_policy policy,
              done_fn<sandbox_info> done);
  void fncall(fncall_request req, done_fn<exec_result> done);
  /// Pauses (or resumes) every sandbox of the cluster whose labels include
  /// `labels` (non-empty): the ids done and per-item errors (core/job.hpp).
  void job_action(std::map<std::string, std::string> labels, bool pause,
                  done_fn<job_result> done);

  // -- trajectory log (actors/sandbox_replay.hpp) -----------------------------

  /// The log's NDJSON lines with seq > since (all for since < 0).
  void trajectory(std::string id, int64_t since, done_fn<std::string> done);
  /// A new sandbox rebuilt from `id`'s log up to seq `upto` (< 0: all of it).
  void replay(std::string id, int64_t upto, done_fn<sandbox_info> done);

  // -- processes in a sandbox -----------------------------------------------

  /// Starts a background command; answers with its pid once it runs.
  void exec_background(std::string id, exec_request req, done_fn<background_process> done);
  /// Every process in the sandbox.
  void processes(std::string id, done_fn<std::vector<process_info>> done);
  /// A background command's state and output so far; waits up to `wait_ms`
  /// for its end (0 = answer now).
  void process(std::string id, int32_t pid, int64_t wait_ms, done_fn<background_process> done);
  /// Signals process `pid` (its process group if `group`).
  void signal_process(std::string id, int32_t pid, int32_t signo, bool group,
                      done_fn<bool> done);

  // -- usage ----------------------------------------------------------------

  /// One sample of the sandbox's CPU (since the previous sample) and memory.
  void metrics(std::string id, done_fn<sandbox_metric> done);

  // -- terminals (actors/sandbox_pty.hpp) -------------------------------------

  /// Runs `req` (empty argv: the login shell) on a new cols x rows terminal.
  void pty_open(std::string id, exec_request req, int32_t cols, int32_t rows,
                done_fn<background_process> done);
  /// Types `data` at terminal `pid`.
  void pty_write(std::string id, int32_t pid, std::string data, done_fn<bool> done);
  /// Resizes terminal `pid`.
  void pty_resize(std::string id, int32_t pid, int32_t cols, int32_t rows, done_fn<bool> done);
  // -- shell sessions (issue 26 part 2; actors/sandbox_session.hpp) ---------

  /// Opens a shell session (empty shell: /bin/bash); answered once it runs.
  void session_open(std::string id, std::string shell, std::string cwd,
                    std::map<std::string, std::string> env, done_fn<session_info> done);
  /// Runs `cmd` in session `sid` (timeout_s 0: none).
  void session_run(std::string id, std::string sid, std::string cmd, double timeout_s,
                   done_fn<exec_result> done);
  void session_close(std::string id, std::string sid, done_fn<bool> done);
  void session_list(std::string id, done_fn<std::vector<session_info>> done);
  // -- ports (issue 26 part 3) ------------------------------------------------

  /// Where `port` inside the sandbox is served: the owner's REST address
  /// (a paused sandbox is resumed).
  void port(std::string id, int32_t port, done_fn<port_route> done);

  struct impl;

 private:
  explicit connection(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// A fresh random exec token (never 0); random so tokens of different clients
/// of one node do not collide.
uint64_t new_token();

/// How many forks separate this process from the one that first used the
/// client: 0 there, one more in each forked child. An object that waits for
/// answers of a call records it: when it differs, the call was started before
/// a fork and answers in the parent, so the object must fail, not wait.
uint64_t fork_generation();

/// Stops every connection of this process (calls in flight fail with
/// `unavailable`) and the actor system behind them. Call once at exit, after
/// which no connection may be used.
void shutdown();

/// Runs `start(done)` and blocks until `done` is called. For threads that are
/// not CAF threads (the callback runs on one).
template <class T, class Start>
expected<T> wait(Start start) {
  auto p = std::make_shared<std::promise<expected<T>>>();
  auto f = p->get_future();
  start([p](expected<T> r) { p->set_value(std::move(r)); });
  return f.get();
}

} // namespace dsec::client
