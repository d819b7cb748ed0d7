// A template's start and ready commands (E2B's setStartCmd / setReadyCmd,
// issue 27), the pure half: the commands a create runs in a sandbox made
// from such a template, and what a failure says.
//
// E2B runs the start command once, at build time, waits for the ready
// command and snapshots the running sandbox, memory included; every sandbox
// resumes that snapshot. dsec has no memory snapshot of a build: every
// sandbox from the template starts the command afresh, as a background
// process (as the template's user, in its workdir, with its env and the
// create's envVars), and the create answers once the ready command exits 0,
// run again every 200 ms within the create's budget. A ready command that
// never succeeds fails the create (504, naming the command, its last output
// and the start command's state) and the sandbox is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/types.hpp"

namespace dsec::e2b {

/// What a template asks of every sandbox made from it ("" = nothing).
struct template_start {
  std::string template_id;
  std::string start_cmd;
  std::string ready_cmd;

  bool empty() const { return start_cmd.empty() && ready_cmd.empty(); }
};

/// How long a create waits for the ready command at most, whatever its
/// budget: a create that waits longer than its gateway bound is answered by
/// that bound instead of this error. Seconds.
inline constexpr double max_ready_wait_s = 240;
/// The least a ready command gets (a sandbox with a 1 s TTL still gets a try).
inline constexpr double min_ready_wait_s = 1;

/// The start command as a background exec: the shell line with the
/// sandbox's defaults (user, workdir, env) and no time limit.
exec_request start_command_request(const template_start& t);

/// The ready command run until it exits 0, killed after `budget_s`: one exec
/// whose stderr carries each different output of a failed try, after a
/// \x1e separator (so the last one can be quoted).
exec_request ready_check_request(const template_start& t, double budget_s);

/// The ready wait of a create whose sandbox lives `ttl_s` (0: no TTL): a
/// second less, so the check ends before the sandbox does.
double ready_budget_s(int64_t ttl_s);

/// The message of a ready check that did not succeed: the template, the
/// command, how long it was tried, its last output; `start_state` says what
/// became of the start command ("" if there is none).
std::string ready_failure(const template_start& t, const exec_result& r, double budget_s,
                          const std::string& start_state);

/// What became of the start command, for ready_failure: "still running",
/// or its exit code and the tail of its output.
std::string start_state_of(const background_process& p);

} // namespace dsec::e2b
