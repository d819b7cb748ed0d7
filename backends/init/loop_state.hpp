// The state of dsec-init's event loop, shared by its parts: the node's
// connection (connection.cpp: frames in and out, the handshake), the exec
// jobs (jobs.cpp: children, their pipes, stdin, timeouts, reaping) and the
// loop itself (main.cpp: one epoll set, each registration keyed by a kind
// and a slot). Single-threaded: only init's main thread touches it.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "backends/channel/protocol.hpp"
#include "backends/channel/pty_proto.hpp"

namespace dsec::init {

/// The listening socket the node connects to (a restarted node reconnects).
constexpr int listen_fd = 3;

/// What an epoll registration is; the slot (a job's, a drain's) rides above.
enum kind : uint64_t { k_listen = 1, k_ctl, k_signal, k_stdin, k_stdout, k_stderr, k_drain,
                       k_port /* ports.cpp */,
                       k_sudo_listen, k_sudo /* sudo.cpp */ };

/// The epoll key of `k` for slot `id`.
inline uint64_t key(kind k, uint32_t id) { return (uint64_t(id) << 8) | k; }

/// Monotonic time in whole milliseconds (deadlines).
inline int64_t now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

/// Monotonic time in fractional milliseconds (durations).
inline double now_ms_f() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

// Jobs are keyed by a slot number of init's own; `req` is the node's id,
// unique per connection only: a reconnected node starts counting again, and
// the old connection's jobs finish silently (`gen` tells them apart).
struct job {
  uint32_t req = 0, gen = 0;
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string stdin_data;
  size_t stdin_off = 0;
  size_t sent[2] = {0, 0};
  double start = 0, end = 0;
  int64_t deadline = 0; // timeout, 0 = none
  int64_t grace = 0;    // pipe EOF wait after exit
  bool exited = false, timed_out = false, truncated = false;
  int status = 0;
  // keep_stdin: stdin stays open for stdin_data frames until one says close
  // (stdin_eof); in_watched: `in` is in the epoll set for EPOLLOUT.
  bool keep_stdin = false, stdin_eof = false, in_watched = false;
  // A terminal (pty.cpp): `in` and `out` are the pty master; output is not
  // capped at max_output.
  bool pty = false;
  // unbounded: no max_output cap (a shell session's shell, issue 26 part 2).
  bool unbounded = false;
};

/// Everything the loop keeps between events.
struct state {
  int ep = -1;
  int ctl = -1;
  int sig = -1;
  std::string ibuf, obuf;
  std::map<uint32_t, job> jobs;
  std::map<pid_t, uint32_t> by_pid;
  uint32_t gen = 0, next_slot = 0;
  /// Pipes of finished execs still held by something in the sandbox.
  std::map<uint32_t, int> drains;
  uint32_t next_drain = 0;
};

/// The one loop state (main.cpp).
extern state S;

// -- the epoll set (main.cpp) -------------------------------------------------

/// Watches `fd` for `events` under key `k`.
void ep_add(int fd, uint32_t events, uint64_t k);
/// Changes what `fd` is watched for.
void ep_mod(int fd, uint32_t events, uint64_t k);
/// Stops watching and closes `fd` (if open); sets it to -1.
void close_fd(int& fd);

// -- the node's connection (connection.cpp) -----------------------------------

/// Closes the node's connection; frames not yet sent are lost.
void drop_connection();
/// Writes what the socket takes of the pending frames.
void flush();
/// Queues one frame for the node (dropped while no node is connected).
void send_frame(std::string frame);
/// Reads and handles every whole frame the node sent.
void read_ctl();
/// Takes a new connection on the listening socket: the newest node wins.
void accept_new();
/// Blocking handshake: accept, read `config`, set up, answer `ready` or
/// `failed`. True if the sandbox is ready.
bool bootstrap();

// -- exec jobs (jobs.cpp) -------------------------------------------------------

/// Starts the command of exec request `req` (answers `started`, or
/// `exec_failed`).
void start_exec(uint32_t req, init_proto::exec_msg m);
/// SIGKILLs the process group of request `req`, if it still runs.
void cancel_exec(uint32_t req);
/// More stdin for request `req` (started with keep_stdin), then EOF if `eof`.
void feed_stdin(uint32_t req, std::string_view data, bool eof);
/// Writes pending stdin of job `slot`.
void write_stdin(uint32_t slot);
/// Forwards output of job `slot` on `stream` (1 stdout, 2 stderr).
void read_output(uint32_t slot, int stream);
/// Reads and discards a finished exec's pipe `id`, closing it at EOF.
void drain(uint32_t id);
/// Reaps every exited child; finishes the jobs whose command exited.
void reap();
/// Kills commands past their timeout; finishes jobs past their pipe grace.
void check_deadlines();
/// Milliseconds until the next deadline, -1 for none (epoll_wait's timeout).
int next_timeout();
/// A small file's text ("" if it cannot be read), at most 4 MiB.
std::string read_small_file(const char* path);

// -- terminals (pty.cpp) ---------------------------------------------------------

/// Starts the command of `pty_open` request `req` on a new terminal of
/// `size` (answers `started`, or `exec_failed` / `exec_refused`).
void start_pty(uint32_t req, init_proto::exec_msg m, const init_proto::pty_size& size);
/// Sets the size of request `req`'s terminal (its foreground job gets SIGWINCH).
void resize_pty(uint32_t req, const init_proto::pty_size& size);

// -- port streams (ports.cpp; issue 26 part 3) --------------------------------

/// Handles a port_open, port_data or port_close frame from the node.
void port_frame(const init_proto::header& h, std::string_view body);
/// A port stream's socket `id` is ready.
void port_event(uint32_t id, uint32_t events);
/// Closes every port stream (the node's connection is gone).
void close_ports();

// -- sudo (sudo.cpp; issue 27) --------------------------------------------------

/// Listens on sudo_proto::sudo_socket_path if the sandbox has the sudo
/// policy file; otherwise does nothing.
void sudo_listen();
/// Takes (or refuses, by the peer's uid) new sudo connections.
void sudo_accept();
/// A sudo connection `id` is readable: its request, a signal, or its end.
void sudo_event(uint32_t id);
/// Reports the end of a sudo command; false if `pid` is not one.
bool sudo_reaped(pid_t pid, int status);

} // namespace dsec::init
