// The trajectory log on disk: one directory per sandbox under --trajectory-dir,
//
//   <dir>/<sandbox id>/log.ndjson          one record a line (core/trajectory.hpp)
//   <dir>/<sandbox id>/blobs/sha256-<hex>  content too big (or not UTF-8) to inline
//
// plus the serial executor that keeps a sandbox's writes in order off the
// actor threads. Plain C++ (no CAF), so unit tests drive it directly.
//
// Write policy: a record is written with one write(2) on an O_APPEND file
// before the call it records is answered, so an answer a client saw survives
// a kill -9 of the node (the page cache has it). No fsync unless
// --trajectory-fsync: a host crash may lose the last records, as it loses the
// sandboxes themselves. A blob is written (temp file + rename) before the line
// that names it, so a line never points at a missing blob.
//
// Only the owner node writes a sandbox's log; any node reads it (a replay, a
// GET for a sandbox whose node is gone), so the directory can be shared.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/trajectory.hpp"
#include "sys/worker_pool.hpp"

namespace dsec::trajectory {

/// Where and how logs are kept (from `dsec node` flags).
struct store_options {
  /// Root of every log; empty = no log (--no-trajectory).
  std::string dir;
  size_t inline_max = limits::default_inline_max;
  size_t blob_max = limits::default_blob_max;
  /// fsync each record and blob (--trajectory-fsync).
  bool fsync = false;
  /// A destroyed sandbox's log is removed this long after its last write
  /// (--trajectory-keep-days, default 7: a week covers a preempted job that
  /// is rescheduled late; a longer keep only costs disk).
  int64_t keep_destroyed_ms = int64_t{7} * 24 * 3600 * 1000;
  /// A log that never saw its sandbox destroyed (its node was lost) is
  /// removed after this long without a write: four times the keep.
  int64_t keep_orphan_ms = int64_t{28} * 24 * 3600 * 1000;
};

/// <dir>/<id>.
std::string log_dir(const store_options& o, const std::string& id);

/// The verdict on an exec that carries a step key.
struct step_verdict {
  enum kind_t { run, replay, conflict, failed } kind = run;
  /// replay: the recorded answer (replayed = true).
  exec_result result;
  /// conflict (the 409 naming what differs) or failed (the log is unreadable).
  error err;
};

/// One sandbox's log, as its owner writes it. Not thread-safe: only the
/// sandbox's strand touches it.
class sandbox_log {
 public:
  sandbox_log(store_options opts, std::string id, std::string node, sandbox_spec spec);
  ~sandbox_log();
  sandbox_log(const sandbox_log&) = delete;
  sandbox_log& operator=(const sandbox_log&) = delete;

  /// Opens the log once: reads an existing one (a node restarted: next seq
  /// and the steps it holds; a torn last line is cut off), or starts a new
  /// one whose seq 0 is the spec record. Later calls return the first outcome
  /// (or try again after a failure).
  status open();

  /// Appends `r`: assigns its seq, computes each content's digest and size,
  /// stores blobs, writes the line. Answers the seq.
  expected<uint64_t> append(record r);

  /// What to do with an exec that carries a step (open() first). A `run`
  /// verdict reserves the step until append() logs it or release() frees it,
  /// so the same step sent twice at once runs once (the second gets 409).
  step_verdict check_step(const exec_request& req);

  /// Frees a step reserved by check_step whose exec did not produce a result.
  void release(const std::string& step);

  /// The next seq to assign.
  uint64_t next_seq() const { return next_seq_; }

 private:
  status store(content& c, std::string data);

  store_options opts_;
  std::string id_;
  std::string node_;
  sandbox_spec spec_;
  std::string dir_;
  int fd_ = -1;
  bool opened_ = false;
  uint64_t next_seq_ = 0;
  /// Logged exec records with a step, content bytes dropped (loaded again
  /// from blobs when a step is replayed).
  std::map<std::string, record> steps_;
  std::set<std::string> reserved_;
};

/// The lines of `id`'s log with seq > since (all with since < 0), each ending
/// in a newline. not_found if there is no log.
expected<std::string> read_log(const store_options& o, const std::string& id, int64_t since);

/// Every record of `id`'s log, in order (for a replay). not_found if none.
expected<std::vector<record>> read_records(const store_options& o, const std::string& id);

/// Fills `c.data` from `id`'s blobs when `c` is a blob (checking the digest);
/// inline content is already there; digest-only content fails (conflict).
status load_content(const store_options& o, const std::string& id, content& c);

/// Removes the logs past their keep (store_options). Answers how many.
size_t prune(const store_options& o, int64_t now_ms);

/// Runs jobs one at a time, in submission order, on a worker pool: a
/// sandbox's log writes keep their order without holding a pool thread
/// between them.
class strand : public std::enable_shared_from_this<strand> {
 public:
  explicit strand(std::shared_ptr<sys::worker_pool> pool) : pool_(std::move(pool)) {}
  void submit(std::function<void()> job);

 private:
  void drain();

  std::shared_ptr<sys::worker_pool> pool_;
  std::mutex mu_;
  std::deque<std::function<void()>> jobs_;
  bool running_ = false;
};

} // namespace dsec::trajectory
