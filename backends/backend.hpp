// The backend interface: how a node makes, drives and tears down one kind of
// sandbox. Container, microVM, VM and FnCall backends implement it; the actors
// call it and know nothing else about them.
//
// Plain C++, no CAF: create/destroy/files are blocking and run on the node's
// worker pool; exec is asynchronous and reports through callbacks that run on
// a backend-owned I/O thread (the callbacks must not block: the actors'
// callbacks only anon_send).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/fs_entry.hpp"
#include "core/types.hpp"
#include "sys/fd.hpp"

namespace dsec::backends {

/// Everything a backend needs to make one sandbox.
struct create_params {
  /// The sandbox id (`<node>.<unique>`), also its hostname.
  std::string id;
  sandbox_spec spec;
  /// Mounted layer directories, bottom first (spec.layers order).
  std::vector<std::string> lower_dirs;
  /// A directory for this sandbox alone, on local disk; it does not exist
  /// yet. The backend creates it and removes it on failure and destroy.
  std::string dir;
  /// `dir` exists and holds the files of this sandbox, powered off
  /// (sandbox::power_off): boot it again on them. A failed boot leaves
  /// them as they were, still powered off.
  bool boot_again = false;
};

/// Checks what every backend relies on: a plain id (no '/', not "." or
/// ".."), an absolute dir, at least one layer dir, each absolute and free of
/// the characters mount options split on (',', ':', '\\'). Implemented in
/// backend.cpp.
status check_params(const create_params& p);

/// Streaming and completion callbacks of one exec. Both run on a backend I/O
/// thread; `on_done` runs exactly once, after the last `on_output`.
struct exec_callbacks {
  std::function<void(exec_chunk)> on_output;
  std::function<void(expected<exec_result>)> on_done;
  /// The command's pid inside the sandbox, once, before any on_output; not
  /// called by backends (or inits) that cannot tell it. (After the first two
  /// so `{on_output, on_done}` initializers keep working.)
  std::function<void(int32_t pid)> on_started;
  /// False: the result passed to on_done carries no output (the caller keeps
  /// what on_output gave it), so a long-running command's output is not held
  /// twice. Truncation is reported either way.
  bool keep_output = true;
  /// True: stdin stays open after exec_request::stdin_data, for send_stdin()
  /// (E2B's `stdin: true`); false: closed once stdin_data is written.
  bool keep_stdin = false;
  /// Non-zero: run the command on a new terminal of this many columns and
  /// rows (stdin kept open, output on stream 1 without the exec cap; an
  /// empty argv is the user's login shell). Backends without terminals
  /// refuse it through on_done.
  uint16_t pty_cols = 0, pty_rows = 0;
  /// True: no per-stream output cap over the exec's life (a shell session's
  /// shell, issue 26 part 2: its caller cuts and bounds each run itself).
  bool unbounded_output = false;
};

/// One change below a watched directory (sandbox::watch_dir).
struct dir_event {
  /// "create", "write", "remove", "rename" or "chmod" (E2B's event types).
  std::string type;
  /// What changed, relative to the watched directory ("a/b.txt").
  std::string name;
};

/// Callbacks of one directory watch. Both run on a backend I/O thread, in
/// the order the changes happened; they must not block.
struct watch_callbacks {
  std::function<void(dir_event)> on_event;
  /// Once, if the watch stops by itself (the directory or the sandbox went
  /// away, the kernel dropped events); never after the handle is released.
  std::function<void(error)> on_end;
};

/// A running directory watch. Nothing is reported before start(); releasing
/// the last reference stops it (a callback already running may finish).
class dir_watch {
 public:
  virtual ~dir_watch() = default;
  /// Lets events flow (the caller has told its subscriber the watch is set).
  virtual void start() = 0;
};

/// One live sandbox. Thread-safe.
class sandbox {
 public:
  virtual ~sandbox() = default;

  /// Starts `req`; never blocks. Errors (sandbox gone) arrive via on_done.
  /// Returns an id for cancel().
  virtual uint64_t exec(exec_request req, exec_callbacks cb) = 0;

  /// Kills the process group of a running exec (its on_done still comes,
  /// with the signal as exit code). Unknown or finished ids are ignored.
  virtual void cancel(uint64_t exec_id) = 0;

  /// Writes `data` to the stdin of a running exec started with keep_stdin,
  /// then closes it if `close`. Never blocks (queued to init). not_found if
  /// the exec has ended.
  virtual status send_stdin(uint64_t exec_id, std::string_view data, bool close) {
    (void)exec_id, (void)data, (void)close;
    return unsupported("stdin to a running command");
  }

  /// Writes a file at absolute `path` inside the sandbox, creating parent
  /// directories. Resolved inside the sandbox root: no symlink leads out.
  /// Blocking.
  virtual status write_file(const std::string& path, std::string_view data,
                            uint32_t mode) = 0;

  /// Reads a file at absolute `path` inside the sandbox, at most `max_bytes`
  /// (too_large beyond). Resolved inside the sandbox root. Blocking.
  virtual expected<std::string> read_file(const std::string& path,
                                          size_t max_bytes) = 0;

  /// Calls `f(reason)` once if the sandbox dies on its own (its init exited,
  /// was OOM-killed, ...), from a backend thread. Not called after destroy().
  virtual void on_exit(std::function<void(std::string reason)> f) = 0;

  /// Kills everything in the sandbox and releases every resource it holds
  /// (processes, mounts, cgroups, directory). Idempotent. Blocking.
  virtual status destroy() = 0;

  /// Host pid of the sandbox's init (for metrics and tests), -1 if none.
  virtual int init_pid() const = 0;

  // -- optional capabilities (default: refused, naming the operation) -------

  /// Stops every process and frees what memory it can; files and processes
  /// survive. Blocking.
  virtual status pause() { return unsupported("pause"); }

  /// Undoes pause(). Blocking.
  virtual status resume() { return unsupported("resume"); }

  /// A pause that keeps only the files (E2B's keepMemory false): every
  /// process ends and every resource but the sandbox's directory is
  /// released; the sandbox is then powered_off() and answers nothing until
  /// its backend's create() boots it again on the same files
  /// (create_params::boot_again). destroy() still removes it. Blocking.
  virtual status power_off() { return unsupported("pause without memory"); }

  /// power_off() ran: the handle holds the files only.
  virtual bool powered_off() const { return false; }

  /// Whether the kernel holds the sandbox's processes stopped by pause()
  /// now, where the backend can tell (nullopt elsewhere). What the node
  /// adopts after a restart trusts this over its record, which is written
  /// after the pause or resume answers.
  virtual std::optional<bool> frozen() const { return std::nullopt; }

  /// The directory holding the sandbox's changes in overlayfs upper form
  /// (whiteouts as 0:0 character devices, opaque directories marked with the
  /// trusted.overlay.opaque xattr), for snapshots. The caller pauses the
  /// sandbox while it reads it.
  virtual expected<std::string> changes_dir() { return unsupported("snapshot"); }

  /// Replaces the network policy; new connections see it at once. Blocking.
  virtual status set_network(const network_policy&) { return unsupported("set network"); }

  /// What the sandbox uses now (see usage_sample). Blocking but cheap (a few
  /// small file reads): call it from the worker pool.
  virtual expected<usage_sample> usage() { return unsupported("measure usage"); }

  /// Pushes the sandbox's cold memory into the node's compressed swap, best
  /// effort, without stopping it. Returns the bytes that left RAM. Blocking.
  virtual expected<int64_t> reclaim() { return unsupported("reclaim memory"); }

  /// Moves every process of the sandbox, present and forked later, to CPU
  /// class `cls` ("latency" | "batch", already validated). Blocking.
  virtual status set_cpu_class(const std::string& cls) {
    (void)cls;
    return unsupported("set cpu class");
  }

  /// Stat, list, mkdir, move or remove (`fs_ops` in core/fs_entry.hpp) at
  /// absolute `path` inside the sandbox, resolved inside its root like the
  /// file calls; `to` is a move's destination, `depth` a list's levels.
  /// Blocking.
  virtual expected<std::vector<fs_entry>> file_op(const std::string& op, const std::string& path,
                                                  const std::string& to, int32_t depth) {
    (void)op, (void)path, (void)to, (void)depth;
    return unsupported("filesystem operations (stat, list, mkdir, move, remove)");
  }

  /// Watches directory `path` (absolute, inside the sandbox; resolved in its
  /// root like the file calls, no symlink leads out) for changes, and with
  /// `recursive` every directory below it, present and made later. Blocking
  /// (it opens each directory it watches); events flow after start().
  virtual expected<std::shared_ptr<dir_watch>> watch_dir(const std::string& path, bool recursive,
                                                         watch_callbacks cb) {
    (void)path, (void)recursive, (void)cb;
    return unsupported("watch a directory");
  }

  /// What the sandbox tried and was refused, so far.
  virtual denial_counts denials() { return {}; }

  /// The processes in the sandbox as its init sees them (pids as inside).
  /// Never blocks; `done` runs once, on a backend thread.
  virtual void processes(std::function<void(expected<std::vector<process_info>>)> done) {
    done(unsupported("list processes"));
  }

  /// Sends `signo` to process `pid` inside the sandbox, or to its process
  /// group if `group`. not_found if there is none, invalid_argument for the
  /// sandbox's init (pid 1) or a bad signal. Never blocks; `done` runs once,
  /// on a backend thread.
  virtual void signal_process(int32_t pid, int32_t signo, bool group,
                              std::function<void(status)> done) {
    (void)pid, (void)signo, (void)group;
    done(unsupported("signal a process"));
  }

  /// Sets the size of the terminal of a running exec started with a pty
  /// (its foreground job gets SIGWINCH). Never blocks. not_found if the
  /// exec has ended.
  virtual status resize_pty(uint64_t exec_id, uint16_t cols, uint16_t rows) {
    (void)exec_id, (void)cols, (void)rows;
    return unsupported("resize a terminal");
  }

  // -- ports (issue 26 part 3) ------------------------------------------------

  /// A nonblocking stream socket to 127.0.0.1:`port` inside the sandbox,
  /// connected or still connecting (a refused port shows as an error on its
  /// first read or write). It never gives the sandbox network access of its
  /// own: a container's socket is made in its network namespace by the
  /// calling thread, a guest's is relayed by its init. Quick, but a
  /// container's may switch the calling thread's network namespace for a
  /// moment: call it from a thread of its own (actors/gateway_ports.cpp).
  virtual expected<sys::unique_fd> open_port(uint16_t port) {
    (void)port;
    return unsupported("reach a port");
  }

 protected:
  static error unsupported(const char* op) {
    return error{errc::invalid_argument,
                 std::string{op} + ": not supported by this sandbox's backend"};
  }
};

/// A kind of sandbox. Thread-safe.
class backend {
 public:
  virtual ~backend() = default;

  /// "container", "microvm", ...
  virtual std::string_view name() const = 0;

  /// Builds and starts a sandbox. On failure nothing it acquired remains.
  /// Blocking.
  virtual expected<std::shared_ptr<sandbox>> create(const create_params& p) = 0;

  /// Re-attaches to a sandbox that outlived a node restart, from its `dir`.
  /// Blocking.
  virtual expected<std::shared_ptr<sandbox>> recover(const std::string& id,
                                                     const std::string& dir) = 0;
};

} // namespace dsec::backends
