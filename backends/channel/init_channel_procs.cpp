// The process table and signals of a sandbox, container or VM guest alike:
// `ps` and `signal` requests to init on the control channel, answered by one
// frame each.
#include "backends/channel/init_channel.hpp"

#include <signal.h>

#include <cerrno>
#include <cstring>

namespace dsec::backends {

namespace proto = init_proto;

void init_channel::send_query(const std::function<std::string(uint32_t)>& encode,
                                   query_fn fn) {
  std::unique_lock<std::mutex> g(m_);
  error err;
  if (shut_)
    err = unavailable("sandbox destroyed");
  else if (dead_ || !channel_open_)
    err = unavailable(death_);
  if (err) {
    g.unlock();
    loop_->post([fn = std::move(fn), err = std::move(err)] { fn(nullptr, {}, &err); });
    return;
  }
  uint32_t id = next_id_++;
  queries_[id] = std::move(fn);
  bool was_empty = out_.empty();
  out_ += encode(id);
  if (was_empty)
    flush_locked();
}

void init_channel::processes(
  std::function<void(expected<std::vector<process_info>>)> done) {
  auto what = "list processes in " + parts_.id;
  send_query([](uint32_t id) { return proto::writer(proto::msg::ps, id).finish(); },
             [done = std::move(done), what](const proto::header* h, std::string_view body,
                                            const error* err) {
               if (err) {
                 done(error{err->code, what + ": " + err->message});
                 return true;
               }
               std::vector<proto::proc_entry> entries;
               if (h->type != proto::msg::ps_list || !proto::decode_ps(body, entries)) {
                 done(internal_error(what + ": malformed answer from init"));
                 return false;
               }
               std::vector<process_info> out;
               out.reserve(entries.size());
               for (auto& e : entries) {
                 process_info p;
                 p.pid = e.pid;
                 p.ppid = e.ppid;
                 p.argv = std::move(e.argv);
                 p.name = std::move(e.comm);
                 p.state = e.state ? std::string(1, char(e.state)) : std::string("?");
                 p.started_at_ms = int64_t(e.start_ms);
                 out.push_back(std::move(p));
               }
               done(std::move(out));
               return true;
             });
}

void init_channel::cpu_time(std::function<void(expected<int64_t>)> done) {
  auto what = "read the CPU time of " + parts_.id;
  uint32_t v = 0;
  {
    std::lock_guard<std::mutex> g(m_);
    v = version_;
  }
  if (v < 4) // an older init drops a frame it does not know
    return done(invalid_argument(what + ": its init speaks protocol version " + std::to_string(v)
                            + ", before cpu_query"));
  send_query([](uint32_t id) { return proto::writer(proto::msg::cpu_query, id).finish(); },
             [done = std::move(done), what](const proto::header* h, std::string_view body,
                                            const error* err) {
               if (err) {
                 done(error{err->code, what + ": " + err->message});
                 return true;
               }
               proto::reader r(body);
               auto ns = r.u64();
               if (h->type != proto::msg::cpu_time || !r.done()) {
                 done(internal_error(what + ": malformed answer from init"));
                 return false;
               }
               done(static_cast<int64_t>(ns));
               return true;
             });
}

void init_channel::signal_process(int32_t pid, int32_t signo, bool group,
                                       std::function<void(status)> done) {
  auto what = "signal " + std::to_string(signo) + " to " + (group ? "process group " : "pid ")
              + std::to_string(pid) + " in " + parts_.id;
  // Checked here for a clear message; init refuses the same on its own.
  if (signo < 1 || signo > SIGRTMAX)
    return done(invalid_argument(what + ": signal must be 1.." + std::to_string(SIGRTMAX)));
  if (pid < 1)
    return done(invalid_argument(what + ": pid must be positive"));
  if (pid == 1)
    return done(invalid_argument(what + ": pid 1 is the sandbox's init; destroy the sandbox "
                                 "to stop everything"));
  proto::signal_msg m{pid, signo, group};
  send_query([m](uint32_t id) { return proto::encode(id, m); },
             [done = std::move(done), what, pid](const proto::header* h, std::string_view body,
                                                 const error* err) {
               if (err) {
                 done(error{err->code, what + ": " + err->message});
                 return true;
               }
               proto::reader r(body);
               int e = r.i32();
               if (h->type != proto::msg::signal_done || !r.done()) {
                 done(internal_error(what + ": malformed answer from init"));
                 return false;
               }
               if (e == 0)
                 done(status{});
               else if (e == ESRCH)
                 done(not_found(what + ": no such process"));
               else if (e == EPERM)
                 done(invalid_argument(what + ": refused, pid " + std::to_string(pid)
                                       + " belongs to the sandbox's init"));
               else if (e == EINVAL)
                 done(invalid_argument(what + ": invalid signal"));
               else
                 done(sys_error("kill", what, e));
               return true;
             });
}

} // namespace dsec::backends
