// A template's start and ready commands in a sandbox just created from it
// (api/e2b_start_cmd.hpp): the start command as a background process, then
// the ready check as one exec bounded by the sandbox's timeout; the create
// answers after both. A failure destroys the sandbox before the answer, so
// nothing is left behind. Every step is a request to the front door: no
// thread waits.
#include "actors/e2b_gateway.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/operations.hpp"
#include "api/e2b_start_cmd.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec::e2b {

namespace {

using done_fn = std::function<void(sandbox_info&)>;

/// Destroys the sandbox, then answers `c` with `err` (the destroy's own
/// failure only logged in the message: the sandbox's TTL still ends it).
void fail_create(const gateway_ref& g, const http_call& c, const std::string& id, error err) {
  g.self->request(g.front, call_wait(hop::front), destroy_atom::value, id)
    .then([c, err](bool) { reply_error(c, err); },
          [c, err, id](caf::error& e) {
            reply_error(c, error{err.code, err.message + " (destroying " + id
                                             + " failed too: " + from_caf(e).message + ")"});
          });
}

/// Step 2: the ready check; on failure, the start command's state joins the
/// message.
void await_ready(const gateway_ref& g, const http_call& c, sandbox_info info, template_start t,
                 int32_t start_pid, done_fn done) {
  auto budget = ready_budget_s(info.ttl_s);
  auto bound = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::duration<double>(budget))
               + exec_slack_outer;
  auto id = info.id;
  g.self->request(g.front, caf::duration{bound}, exec_atom::value, id, ready_check_request(t, budget),
                  uint64_t{0})
    .then(
      [g, c, info, t, start_pid, budget, done](exec_result& r) mutable {
        if (r.exit_code == 0 && !r.timed_out)
          return done(info);
        auto fail = [g, c, id = info.id, t, r, budget](const std::string& state) {
          fail_create(g, c, id, error{errc::timeout, ready_failure(t, r, budget, state)});
        };
        if (start_pid <= 0)
          return fail({});
        g.self->request(g.front, call_wait(hop::front), proc_atom::value, info.id, start_pid,
                        int64_t{0})
          .then([fail](background_process& p) { fail(start_state_of(p)); },
                [fail](caf::error&) { fail("is gone"); });
      },
      [g, c, id, t](caf::error& e) {
        auto err = from_caf(e);
        fail_create(g, c, id, error{err.code, "create from template " + t.template_id
                                                + ": its ready command `" + t.ready_cmd
                                                + "` did not complete: " + err.message});
      });
}

} // namespace

void start_template_commands(const gateway_ref& g, const http_call& c, sandbox_info info,
                             template_start t, done_fn done) {
  if (t.start_cmd.empty()) {
    if (t.ready_cmd.empty())
      return done(info);
    return await_ready(g, c, std::move(info), std::move(t), 0, std::move(done));
  }
  auto id = info.id;
  g.self->request(g.front, call_wait(hop::front), bgexec_atom::value, id, start_command_request(t))
    .then(
      [g, c, info, t, done](background_process& p) mutable {
        if (t.ready_cmd.empty())
          return done(info);
        await_ready(g, c, std::move(info), std::move(t), p.pid, std::move(done));
      },
      [g, c, id, t](caf::error& e) {
        auto err = from_caf(e);
        fail_create(g, c, id, error{err.code, "create from template " + t.template_id
                                                + ": its start command did not start: "
                                                + err.message});
      });
}

} // namespace dsec::e2b
