// The sandbox actor's trajectory log (see sandbox_trajectory.hpp).
#include "actors/sandbox_ops.hpp"
#include "actors/sandbox_trajectory.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"

namespace dsec {

namespace {

void warn(sandbox_actor_ptr self, const std::string& what, const error& err) {
  caf::aout(self) << "sandbox " << self->state.info.id << ": trajectory log: " << what << ": "
                  << err.message << std::endl;
}

/// Runs `job(log)` on the sandbox's strand, then `then(result)` in the actor;
/// the actor stays alive (inflight) until `then` ran.
template <class Job, class Then>
void on_strand(sandbox_actor_ptr self, Job job, Then then) {
  auto& st = self->state;
  ++st.inflight;
  auto hdl = caf::actor_cast<caf::actor>(self);
  auto h = st.log;
  h->strand->submit([h, hdl, job = std::move(job), then = std::move(then)]() mutable {
    auto res = std::make_shared<decltype(job(*h->log))>(job(*h->log));
    run_in(hdl, [res, then = std::move(then)]() mutable { then(*res); });
  });
}

double ms_since(int64_t received_ns) {
  auto start = received_ns > 0
                 ? std::chrono::steady_clock::time_point{std::chrono::nanoseconds{received_ns}}
                 : std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
    .count();
}

} // namespace

std::shared_ptr<trajectory_handle> make_trajectory(const node_context& ctx,
                                                   const std::string& id,
                                                   const sandbox_spec& spec) {
  if (ctx.trajectory.dir.empty() || !ctx.pool)
    return nullptr;
  auto h = std::make_shared<trajectory_handle>();
  h->opts = ctx.trajectory;
  h->strand = std::make_shared<trajectory::strand>(ctx.pool);
  h->log = std::make_shared<trajectory::sandbox_log>(ctx.trajectory, id, ctx.config.node_id, spec);
  return h;
}

void trajectory_open(sandbox_actor_ptr self, std::function<void()> then) {
  if (!self->state.log)
    return then();
  on_strand(self, [](trajectory::sandbox_log& log) { return log.open(); },
            [self, then = std::move(then)](status& st) {
              if (!st)
                warn(self, "open", st.err());
              then();
              end_op(self);
            });
}

void trajectory_exec(sandbox_actor_ptr self, caf::response_promise rp, exec_request req,
                     std::function<void(exec_chunk)> sink, uint64_t token) {
  auto& st = self->state;
  if (req.step.empty() || !st.log)
    return run_exec(self, std::move(rp), std::move(req), std::move(sink), token);
  if (!st.running_steps.insert(req.step).second) {
    rp.deliver(to_caf(conflict("step \"" + req.step + "\" of sandbox " + st.info.id
                               + " is running now; send it again once it ended to get its "
                                 "result")));
    return;
  }
  auto shared_req = std::make_shared<exec_request>(std::move(req));
  on_strand(
    self, [shared_req](trajectory::sandbox_log& log) { return log.check_step(*shared_req); },
    [self, rp, shared_req, sink = std::move(sink), token](trajectory::step_verdict& v) mutable {
      auto& st = self->state;
      if (v.kind == trajectory::step_verdict::run) {
        auto step = shared_req->step;
        auto inflight = st.inflight;
        auto deferred = st.after_resume.size();
        run_exec(self, std::move(rp), std::move(*shared_req), std::move(sink), token);
        // Refused at once (the sandbox is not running): nothing holds the step.
        if (st.inflight == inflight && st.after_resume.size() == deferred)
          st.running_steps.erase(step);
      } else {
        st.running_steps.erase(shared_req->step);
        if (v.kind == trajectory::step_verdict::replay) {
          // A streamed exec gets the recorded output as its chunks.
          if (sink && !v.result.stdout_data.empty())
            sink(exec_chunk{1, v.result.stdout_data});
          if (sink && !v.result.stderr_data.empty())
            sink(exec_chunk{2, v.result.stderr_data});
          v.result.node_ms = ms_since(shared_req->received_ns);
          rp.deliver(std::move(v.result));
        } else {
          rp.deliver(to_caf(v.err));
        }
      }
      end_op(self);
    });
}

std::shared_ptr<trajectory::record> trajectory_begin(sandbox_actor_ptr self,
                                                     const exec_request& req) {
  if (!self->state.log)
    return nullptr;
  auto r = std::make_shared<trajectory::record>();
  r->kind = "exec";
  r->at_ms = now_ms();
  r->step = req.step;
  r->argv = req.argv;
  r->cwd = req.cwd;
  r->env = req.env;
  r->stdin_data.data = req.stdin_data;
  r->timeout_s = req.timeout_s;
  return r;
}

void trajectory_exec_done(sandbox_actor_ptr self, caf::response_promise rp,
                          std::shared_ptr<trajectory::record> rec, expected<exec_result> res) {
  auto& st = self->state;
  if (!res) {
    st.running_steps.erase(rec->step);
    rp.deliver(to_caf(res.err()));
    return end_op(self);
  }
  rec->exit_code = res->exit_code;
  rec->stdout_data.data = res->stdout_data;
  rec->stderr_data.data = res->stderr_data;
  rec->timed_out = res->timed_out;
  rec->truncated = res->truncated;
  rec->duration_ms = res->duration_ms;
  auto out = std::make_shared<exec_result>(std::move(*res));
  auto began = std::chrono::steady_clock::now();
  on_strand(self, [rec](trajectory::sandbox_log& log) { return log.append(std::move(*rec)); },
            [self, rp, out, began, step = rec->step](expected<uint64_t>& seq) mutable {
              // node_ms counts the log write too: it is part of the node's answer.
              out->node_ms += std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - began).count();
              // The command ran: its caller gets the result even if the log
              // could not take it (said on the node's log).
              if (!seq)
                warn(self, "exec", seq.err());
              self->state.running_steps.erase(step);
              rp.deliver(std::move(*out));
              end_op(self); // the exec's own operation
              end_op(self); // on_strand's
            });
}

namespace {

void append_quietly(sandbox_actor_ptr self, trajectory::record rec, const char* what) {
  on_strand(self, [rec = std::move(rec)](trajectory::sandbox_log& log) mutable {
              return log.append(std::move(rec));
            },
            [self, what](expected<uint64_t>& seq) {
              if (!seq)
                warn(self, what, seq.err());
              end_op(self);
            });
}

} // namespace

void trajectory_background_started(sandbox_actor_ptr self, std::shared_ptr<trajectory::record> rec,
                                   int32_t pid) {
  if (!self->state.log || !rec)
    return;
  rec->background = true;
  rec->pid = pid;
  append_quietly(self, std::move(*rec), "background exec");
}

void trajectory_background_ended(sandbox_actor_ptr self, int32_t pid, const exec_result& res) {
  if (!self->state.log)
    return;
  trajectory::record rec;
  rec.kind = "exit";
  rec.at_ms = now_ms();
  rec.background = true;
  rec.pid = pid;
  rec.exit_code = res.exit_code;
  rec.stdout_data.data = res.stdout_data;
  rec.stderr_data.data = res.stderr_data;
  rec.timed_out = res.timed_out;
  rec.truncated = res.truncated;
  rec.duration_ms = res.duration_ms;
  append_quietly(self, std::move(rec), "background exit");
}

void trajectory_write_file(sandbox_actor_ptr self, caf::response_promise rp, std::string path,
                           std::string data) {
  auto shared = std::make_shared<std::string>(std::move(data));
  auto retry = [self, path, shared](caf::response_promise rp) {
    trajectory_write_file(self, std::move(rp), path, *shared);
  };
  if (!ready_for(self, rp, std::move(retry)))
    return;
  auto& st = self->state;
  ++st.inflight;
  run_blocking(
    self, *st.ctx->pool,
    [sb = st.sb, path, shared]() -> status { return sb->write_file(path, *shared, 0644); },
    [self, rp, path, shared](status& res) mutable {
      if (!res || !self->state.log) {
        if (res)
          rp.deliver(true);
        else
          rp.deliver(to_caf(res.err()));
        return end_op(self);
      }
      trajectory::record rec;
      rec.kind = "file";
      rec.at_ms = now_ms();
      rec.path = path;
      rec.file.data = std::move(*shared);
      on_strand(self, [rec = std::move(rec)](trajectory::sandbox_log& log) mutable {
                  return log.append(std::move(rec));
                },
                [self, rp](expected<uint64_t>& seq) mutable {
                  if (!seq)
                    warn(self, "file write", seq.err());
                  rp.deliver(true);
                  end_op(self);
                  end_op(self);
                });
    });
}

void trajectory_note(sandbox_actor_ptr self, caf::response_promise rp, trajectory::record rec) {
  if (!self->state.log) {
    rp.deliver(true);
    return;
  }
  rec.at_ms = now_ms();
  on_strand(self, [rec = std::move(rec)](trajectory::sandbox_log& log) mutable {
              return log.append(std::move(rec));
            },
            [self, rp](expected<uint64_t>& seq) mutable {
              if (seq)
                rp.deliver(true);
              else
                rp.deliver(to_caf(seq.err()));
              end_op(self);
            });
}

void trajectory_destroyed(sandbox_actor_ptr self, const std::string& reason) {
  if (!self->state.log)
    return;
  trajectory::record rec;
  rec.kind = "destroyed";
  rec.at_ms = now_ms();
  rec.reason = reason;
  on_strand(self, [rec = std::move(rec)](trajectory::sandbox_log& log) mutable {
              return log.append(std::move(rec));
            },
            [self](expected<uint64_t>& seq) {
              if (!seq)
                warn(self, "destroy", seq.err());
              end_op(self);
            });
}

void trajectory_session_note(sandbox_actor_ptr self, trajectory::record rec) {
  if (!self->state.log)
    return;
  append_quietly(self, std::move(rec), "session");
}

} // namespace dsec
