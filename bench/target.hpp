// The interface every system under test implements (dsec through its REST API,
// crun, bwrap), so that one driver runs the same trials on each. A target
// answers single timed trials; the driver repeats them, runs the burst with
// one worker per thread, and turns the samples into the report.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dsec::bench {

/// Memory attributed to sandboxes at one moment, in KiB.
struct memory_reading {
  /// Growth-relevant size of the host-side manager (the dsec node's RSS); 0 for peers.
  double manager_kb = 0;
  /// Sum of PSS of the processes inside the sandboxes (and per-sandbox helpers).
  double sandbox_kb = 0;
  /// Memory cgroup usage attributed to the sandboxes, or -1 if not measurable.
  double cgroup_kb = -1;
};

/// Creates and destroys idle sandboxes; one per burst thread, never shared.
class bench_worker {
 public:
  virtual ~bench_worker() = default;

  /// Creates one idle sandbox and returns its handle once it is ready to run
  /// commands (the time of this call is what the burst charges).
  virtual expected<std::string> create_idle() = 0;

  /// Destroys the sandbox named by `handle`.
  virtual status destroy(const std::string& handle) = 0;
};

/// One system under test.
class bench_target {
 public:
  virtual ~bench_target() = default;

  /// "dsec", "crun", "bwrap": the key in the report.
  [[nodiscard]] virtual std::string name() const = 0;

  /// One trial: create a sandbox, run `echo hi` in it and get "hi" back.
  /// Returns the milliseconds until the output arrived; the teardown that
  /// follows is not timed.
  virtual expected<double> create_first_output() = 0;

  /// False if the system cannot exec into a running sandbox (bwrap).
  [[nodiscard]] virtual bool supports_exec() const { return true; }

  /// Starts the sandbox that exec_true() runs in.
  virtual status start_exec_sandbox() { return {}; }

  /// One trial: run `true` in the running sandbox; returns milliseconds.
  virtual expected<double> exec_true() { return unavailable("exec not supported"); }

  /// Destroys the exec sandbox.
  virtual void stop_exec_sandbox() {}

  /// A new worker for one burst thread.
  virtual std::unique_ptr<bench_worker> make_worker() = 0;

  /// Memory attributed to the sandboxes named by `handles` (created by
  /// workers); called once with none (baseline) and once with the idle set.
  virtual memory_reading read_memory(const std::vector<std::string>& handles) = 0;

  /// What the numbers include, for the report (wrapper costs, method).
  virtual nlohmann::json notes() { return nlohmann::json::object(); }

  /// Removes anything left behind by failed trials.
  virtual void cleanup() {}
};

} // namespace dsec::bench
