// Job-level pause and resume (see job_ops.hpp).
#include "actors/job_ops.hpp"

#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/inspect.hpp"
#include "core/inspect_job.hpp"

namespace dsec {

namespace {

using namespace std::chrono_literals;

/// Bound on one sandbox's pause or resume: a microVM saves or restores its
/// whole machine (seconds); a container freezes in milliseconds. The call
/// bound of the peer hop (core/clock.hpp).
constexpr auto sandbox_timeout = call_wait(hop::peer);
/// Bound on a node's part (its slowest sandbox, plus the hop).
constexpr auto node_timeout = job_wait(hop::peer);
/// A sandbox busy with another pause, resume or snapshot is asked again after
/// this, up to conflict_tries times (a snapshot takes seconds at most).
constexpr auto conflict_retry = 50ms;
constexpr int conflict_tries = 600;

const char* verb(bool pause) { return pause ? "pause" : "resume"; }

/// One node's job action in flight.
struct local_job {
  caf::response_promise rp;
  job_result out;
  size_t left = 0;
  std::string node;
  bool pause = true;

  void finish_one() {
    if (--left == 0)
      rp.deliver(std::move(out));
  }
};
using local_ptr = std::shared_ptr<local_job>;

void ask_sandbox(lifecycle_actor_ptr self, local_ptr job, sandbox_actor sb, std::string id,
                 int tries_left) {
  auto req = job->pause ? self->request(sb, caf::duration{sandbox_timeout}, pause_atom::value)
                        : self->request(sb, caf::duration{sandbox_timeout}, resume_atom::value);
  req.then(
    [job, id](sandbox_info&) {
      job->out.done.push_back(id);
      job->finish_one();
    },
    [self, job, sb, id, tries_left](caf::error& e) {
      auto err = from_caf(e);
      if (err.code == errc::conflict && tries_left > 0) {
        self->delayed_send(self, conflict_retry, cont_atom::value,
                           continuation{[self, job, sb, id, tries_left] {
                             ask_sandbox(self, job, sb, id, tries_left - 1);
                           }});
        return;
      }
      job->out.errors.push_back(
        {id, job->node, err.code, std::string{verb(job->pause)} + " " + id + ": " + err.message});
      job->finish_one();
    });
}

} // namespace

caf::result<job_result> run_job_local(lifecycle_actor_ptr self, const label_map& labels,
                                      bool pause) {
  if (auto st = validate_job_labels(labels, std::string{verb(pause)} + " job"); !st)
    return to_caf(st.err());
  auto job = std::make_shared<local_job>();
  job->node = self->state.ctx->config.node_id;
  job->pause = pause;
  std::vector<std::pair<std::string, sandbox_actor>> targets;
  for (auto& [id, e] : self->state.sandboxes)
    if (labels_match(e.info.labels, labels))
      targets.emplace_back(id, e.actor);
  if (targets.empty())
    return job_result{};
  job->rp = self->make_response_promise();
  job->left = targets.size();
  for (auto& [id, actor] : targets)
    ask_sandbox(self, job, actor, id, conflict_tries);
  return job->rp;
}

caf::result<job_result> run_job_cluster(placement_actor_ptr self, const label_map& labels,
                                        bool pause, const job_peer_ask& ask) {
  auto op = std::string{verb(pause)} + " job";
  if (auto st = validate_job_labels(labels, op); !st)
    return to_caf(st.err());
  struct gather {
    caf::response_promise rp;
    job_result out;
    size_t left = 0;
  };
  auto g = std::make_shared<gather>();
  g->rp = self->make_response_promise();
  auto& me = self->state.ctx->config.node_id;
  std::vector<std::string> peers;
  for (auto& m : self->state.view)
    if (m.id != me && (m.state == "alive" || m.state == "suspect"))
      peers.push_back(m.id);
  g->left = 1 + peers.size();
  auto add = [g, op](const std::string& node, expected<job_result> r) {
    if (r)
      merge(g->out, std::move(*r));
    else
      merge(g->out, job_result{{}, {{"", node, r.err().code,
                                     op + " on node " + node + ": " + r.err().message}}});
    if (--g->left == 0)
      g->rp.deliver(std::move(g->out));
  };
  self->request(self->state.lifecycle, caf::duration{node_timeout}, job_atom::value, labels, pause)
    .then([add, me](job_result& r) { add(me, std::move(r)); },
          [add, me](caf::error& e) { add(me, from_caf(e)); });
  for (auto& p : peers)
    ask(p, [add, p](expected<job_result> r) { add(p, std::move(r)); });
  return g->rp;
}

} // namespace dsec
