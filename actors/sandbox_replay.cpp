// Reading trajectory logs cluster-wide and rebuilding sandboxes from them
// (see sandbox_replay.hpp).
#include "actors/sandbox_replay.hpp"

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/blocking.hpp"
#include "actors/caf_error.hpp"
#include "actors/interfaces.hpp"
#include "core/clock.hpp"
#include "core/ids.hpp"
#include "core/inspect.hpp"
#include "core/session_inspect.hpp"
#include "actors/operations.hpp"

namespace dsec {

namespace {

/// Bounds of the driver's calls: it is a client of the front door, so each
/// waits the front hop's bound (core/clock.hpp): a create walks candidates,
/// a file write moves up to 256 MiB, an exec waits its own timeout plus the
/// outer slack.
constexpr auto create_timeout = create_wait(hop::front);
constexpr auto op_timeout = call_wait(hop::front);
/// A forwarded replay re-runs a whole trajectory: bounded only by this.
constexpr auto replay_timeout = replay_wait(hop::peer);

error bad_id(const std::string& id) {
  return invalid_argument("sandbox id \"" + id.substr(0, 80)
                          + "\" is malformed (expected <node>.<unique>)");
}

error no_log(const node_context& ctx, const std::string& what) {
  return not_found(what + ": node " + ctx.config.node_id
                   + " keeps no trajectory log (started with --no-trajectory)");
}

// -- the replay driver ------------------------------------------------------------

struct replay_state {
  static inline const char* name = "replay";
  node_context_ptr ctx;
  placement_actor front;
  std::string source;
  uint64_t upto = 0;
  std::vector<trajectory::record> records;
  size_t next = 0;
  /// The new sandbox, once created.
  std::string id;
  /// Shell sessions (issue 26 part 2): the source's session id -> the new
  /// sandbox's, as the replay re-opened them.
  std::map<std::string, std::string> sessions;
  caf::response_promise rp;
};
using replay_ptr = caf::stateful_actor<replay_state>*;

std::string who(replay_ptr self) {
  return "replay " + self->state.source;
}

/// Stops the replay: the half-built sandbox goes, the caller gets `err`.
void fail(replay_ptr self, const error& err) {
  auto& st = self->state;
  if (!st.id.empty())
    caf::anon_send(st.front, destroy_atom::value, st.id);
  st.rp.deliver(to_caf(err));
  self->quit();
}

/// A shell session's record (issue 26 part 2).
bool is_session(const trajectory::record& r) {
  return r.kind == "session_open" || r.kind == "session_run" || r.kind == "session_close";
}

error at_record(replay_ptr self, const trajectory::record& r, const error& err) {
  auto what = r.kind == "exec" ? (r.background ? "background exec" : "exec")
              : is_session(r)  ? r.kind + " " + r.session
                               : "write " + r.path;
  return error{err.code, who(self) + " into " + self->state.id + " at seq "
                           + std::to_string(r.seq) + " (" + what + "): " + err.message};
}

/// The fields at_record names, without the record's content.
trajectory::record label_of(const trajectory::record& r) {
  trajectory::record out;
  out.seq = r.seq;
  out.kind = r.kind;
  out.path = r.path;
  out.background = r.background;
  out.session = r.session;
  return out;
}

void next_op(replay_ptr self);

/// A shell session's open, run or close, again in the new sandbox (its runs
/// re-run, so the session's shell state is rebuilt).
void apply_session(replay_ptr self, trajectory::record& r) {
  auto& st = self->state;
  auto on_err = [self, l = label_of(r)](caf::error& e) {
    fail(self, at_record(self, l, from_caf(e)));
  };
  if (r.kind == "session_open") {
    auto shell = r.argv.empty() ? std::string{} : r.argv[0];
    self->request(st.front, caf::duration{op_timeout}, sopen_atom::value, st.id, shell, r.cwd,
                  r.env)
      .then(
        [self, old = r.session](session_info& s) {
          self->state.sessions[old] = s.id;
          next_op(self);
        },
        on_err);
    return;
  }
  auto it = st.sessions.find(r.session);
  if (it == st.sessions.end()) // opened before `upto`'s window or failed: nothing to do
    return next_op(self);
  if (r.kind == "session_close") {
    self->request(st.front, caf::duration{op_timeout}, sclose_atom::value, st.id, it->second)
      .then([self](bool) { next_op(self); }, on_err);
    return;
  }
  caf::duration bound = caf::infinite;
  if (auto wait = exec_wait(r.timeout_s, hop::front))
    bound = caf::duration{*wait + ops::session_stop_grace};
  auto cmd = r.argv.empty() ? std::string{} : r.argv[0];
  // A run that ended its session (`exit`) ends it here too; what it answers
  // is the log's business, not the rebuild's.
  self->request(st.front, bound, srun_atom::value, st.id, it->second, cmd, r.timeout_s)
    .then([self](exec_result&) { next_op(self); },
          [self, l = label_of(r)](caf::error& e) {
            auto err = from_caf(e);
            if (err.code == errc::conflict) // its session had ended in the source too
              return next_op(self);
            fail(self, at_record(self, l, err));
          });
}

void apply(replay_ptr self, trajectory::record& r) {
  auto& st = self->state;
  if (is_session(r))
    return apply_session(self, r);
  auto on_err = [self, l = label_of(r)](caf::error& e) {
    fail(self, at_record(self, l, from_caf(e)));
  };
  if (r.kind == "file") {
    self->request(st.front, caf::duration{op_timeout}, wfile_atom::value, st.id, r.path,
                  std::move(r.file.data))
      .then([self](bool) { next_op(self); }, on_err);
    return;
  }
  exec_request req;
  req.argv = r.argv;
  req.cwd = r.cwd;
  req.env = r.env;
  req.stdin_data = std::move(r.stdin_data.data);
  req.timeout_s = r.timeout_s;
  req.step = r.step;
  if (r.background) { // started again in the background, in its place in the log
    self->request(st.front, caf::duration{op_timeout}, bgexec_atom::value, st.id, std::move(req))
      .then([self](background_process&) { next_op(self); }, on_err);
    return;
  }
  caf::duration bound = caf::infinite;
  if (auto wait = exec_wait(req.timeout_s, hop::front))
    bound = caf::duration{*wait};
  self->request(st.front, bound, exec_atom::value, st.id, std::move(req), uint64_t{0})
    .then([self](exec_result&) { next_op(self); }, on_err);
}

/// The next file write or exec up to `upto`, its content loaded from the
/// log's blobs on the worker pool; the new sandbox's info when none is left.
void next_op(replay_ptr self) {
  auto& st = self->state;
  while (st.next < st.records.size()) {
    auto& r = st.records[st.next];
    if (r.seq > st.upto)
      break;
    if (r.kind == "exec" || r.kind == "file" || is_session(r))
      break;
    ++st.next;
  }
  if (st.next >= st.records.size() || st.records[st.next].seq > st.upto) {
    self->request(st.front, caf::duration{op_timeout}, info_atom::value, st.id)
      .then(
        [self](sandbox_info& info) {
          self->state.rp.deliver(std::move(info));
          self->quit();
        },
        [self](caf::error& e) { fail(self, from_caf(e)); });
    return;
  }
  auto rec = std::make_shared<trajectory::record>(std::move(st.records[st.next++]));
  run_blocking(self, *st.ctx->pool,
               [o = st.ctx->trajectory, src = st.source, rec] {
                 auto& c = rec->kind == "file" ? rec->file : rec->stdin_data;
                 return trajectory::load_content(o, src, c);
               },
               [self, rec](status& loaded) {
                 if (!loaded)
                   return fail(self, at_record(self, *rec, loaded.err()));
                 apply(self, *rec);
               });
}

void on_records(replay_ptr self, expected<std::vector<trajectory::record>>& recs,
                int64_t upto) {
  auto& st = self->state;
  if (!recs)
    return fail(self, error{recs.err().code, who(self) + ": " + recs.err().message});
  st.records = std::move(*recs);
  if (st.records.empty() || st.records.front().kind != "spec")
    return fail(self, internal_error(who(self) + ": its log does not begin with the spec"));
  auto last = st.records.back().seq;
  st.upto = upto < 0 ? last : std::min<uint64_t>(static_cast<uint64_t>(upto), last);
  // Refused before anything is made: a rebuild missing a write would differ.
  for (auto& r : st.records)
    if (r.seq <= st.upto && ((r.kind == "file" && r.file.how == trajectory::keep::digest_only)
                             || (r.kind == "exec"
                                 && r.stdin_data.how == trajectory::keep::digest_only)))
      return fail(self, conflict(who(self) + ": seq " + std::to_string(r.seq) + " ("
                                 + (r.kind == "file" ? "write " + r.path : std::string{"exec stdin"})
                                 + ", " + std::to_string(r.kind == "file" ? r.file.size
                                                                          : r.stdin_data.size)
                                 + " bytes) was logged without its content (over the cap of "
                                 + std::to_string(st.ctx->trajectory.blob_max)
                                 + " bytes); pass an upto_seq before it"));
  auto spec = st.records.front().spec;
  spec.request_id.clear(); // a new sandbox, not the source again
  spec.node.clear();       // anywhere: the source's node may be gone
  st.next = 1;
  self->request(st.front, caf::duration{create_timeout}, create_atom::value, std::move(spec))
    .then(
      [self](sandbox_info& info) {
        auto& st = self->state;
        st.id = info.id;
        self->request(st.front, caf::duration{op_timeout}, rebuilt_atom::value, st.id, st.source,
                      st.upto)
          .then([self](bool) { next_op(self); },
                [self](caf::error& e) { fail(self, from_caf(e)); });
      },
      [self](caf::error& e) {
        auto err = from_caf(e);
        fail(self, error{err.code, who(self) + ": create: " + err.message});
      });
}

caf::behavior replay_driver(replay_ptr self, node_context_ptr ctx, placement_actor front) {
  self->state.ctx = std::move(ctx);
  self->state.front = std::move(front);
  return {
    [self](replay_atom, std::string& source, int64_t upto) {
      auto& st = self->state;
      st.rp = self->make_response_promise();
      st.source = std::move(source);
      run_blocking(self, *st.ctx->pool,
                   [o = st.ctx->trajectory, src = st.source] {
                     return trajectory::read_records(o, src);
                   },
                   [self, upto](expected<std::vector<trajectory::record>>& recs) {
                     on_records(self, recs, upto);
                   });
      return st.rp;
    },
    [](cont_atom, continuation& c) { c.fn(); },
  };
}

} // namespace

namespace {

/// Reads `id`'s log from this node's --trajectory-dir for `rp`.
void read_here(placement_actor_ptr self, caf::response_promise rp, const std::string& id,
               int64_t since) {
  auto& ctx = self->state.ctx;
  if (ctx->trajectory.dir.empty())
    return rp.deliver(to_caf(no_log(*ctx, "trajectory of sandbox " + id)));
  run_blocking(self, *ctx->pool,
               [o = ctx->trajectory, id, since] { return trajectory::read_log(o, id, since); },
               [rp](expected<std::string>& text) mutable {
                 if (text)
                   rp.deliver(std::move(*text));
                 else
                   rp.deliver(to_caf(text.err()));
               });
}

/// Rebuilds `id` here, answering `rp`.
void replay_here(placement_actor_ptr self, caf::response_promise rp, const std::string& id,
                 int64_t upto) {
  auto& ctx = self->state.ctx;
  if (ctx->trajectory.dir.empty())
    return rp.deliver(to_caf(no_log(*ctx, "replay " + id)));
  auto driver = self->spawn(replay_driver, ctx, caf::actor_cast<placement_actor>(self));
  self->request(driver, caf::infinite, replay_atom::value, id, upto)
    .then([rp](sandbox_info& info) mutable { rp.deliver(std::move(info)); },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
}

} // namespace

caf::result<std::string> placement_trajectory(placement_actor_ptr self, const std::string& id,
                                              int64_t since) {
  if (!valid_sandbox_id(id))
    return to_caf(bad_id(id));
  auto rp = self->make_response_promise();
  auto node = live_owner(self, id);
  if (node.empty()) {
    read_here(self, rp, id, since);
    return rp;
  }
  ask_trajectory(self, node, id, since,
                 [self, rp, id, since](expected<std::string> r) mutable {
             if (!r && r.err().code == errc::unavailable) // owner unreachable: the shared dir
               return read_here(self, rp, id, since);
             if (r)
               rp.deliver(std::move(*r));
             else
               rp.deliver(to_caf(r.err()));
           });
  return rp;
}

caf::result<sandbox_info> placement_replay(placement_actor_ptr self, const std::string& id,
                                          int64_t upto) {
  if (!valid_sandbox_id(id))
    return to_caf(bad_id(id));
  auto rp = self->make_response_promise();
  auto node = live_owner(self, id);
  if (node.empty()) {
    replay_here(self, rp, id, upto);
    return rp;
  }
  ask_replay(self, node, id, upto, caf::duration{replay_timeout},
              [self, rp, id, upto](expected<sandbox_info> r) mutable {
                if (!r && r.err().code == errc::unavailable
                    && r.err().message.rfind("replay", 0) != 0) // the owner, not the replay
                  return replay_here(self, rp, id, upto);
                if (r)
                  rp.deliver(std::move(*r));
                else
                  rp.deliver(to_caf(r.err()));
              });
  return rp;
}

} // namespace dsec
