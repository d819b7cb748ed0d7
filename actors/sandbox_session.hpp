// The sandbox actor's shell sessions (issue 26 part 2; DSec's chronus,
// SWE-ReX): each is one long-lived shell started through the backend's exec
// with its stdin kept open, so the same code serves the container and the
// microVM backend, and any peer reaches it through the generic rows of
// actors/operations.hpp. A run writes core/session.hpp's script to the
// shell's stdin and is answered when both output streams showed the run's
// end marker; its output is exactly what came before the markers.
//
// One run at a time per session (another is a conflict). A run whose
// timeout_s passes gets SIGINT on the shell's process group, as Ctrl-C would
// (the shell's INT trap leaves the run, its children die), again each second;
// if the run has not ended session_stop_grace after the timeout, the shell is
// killed and the session ends. A shell that exits (`exit` inside) ends its
// session: the run that exited is answered with its status, later runs get a
// conflict naming why. Sessions die with their sandbox, stay through pause
// and resume (the shell is frozen with everything else), and their opens,
// runs and closes are in the trajectory log, which a replay re-runs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "actors/sandbox.hpp"

namespace dsec {

struct shell_session;

/// A sandbox's sessions by id, and the counter that names the next one.
struct session_table {
  std::map<std::string, std::shared_ptr<shell_session>> by_id;
  uint64_t opened = 0;
};

/// (sopen_atom, shell, cwd, env): starts the shell and answers its
/// session_info once it ran the opening script; invalid_argument naming the
/// shell if it cannot start (not in the sandbox, not executable).
void open_session(sandbox_actor_ptr self, caf::response_promise rp, std::string shell,
                  std::string cwd, std::map<std::string, std::string> env);

/// (srun_atom, sid, cmd, timeout_s): runs `cmd` in session `sid`.
void run_in_session(sandbox_actor_ptr self, caf::response_promise rp, std::string sid,
                    std::string cmd, double timeout_s);

/// (sclose_atom, sid): kills the session's shell (and its jobs) and forgets it.
void close_session(sandbox_actor_ptr self, caf::response_promise rp, std::string sid);

/// (slist_atom): the sandbox's sessions, oldest first.
std::vector<session_info> list_sessions(sandbox_actor_ptr self);

} // namespace dsec
