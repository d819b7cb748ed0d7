// One microvm/vm guest seen from the node (see vm_sandbox.hpp).
#include "backends/vm/vm_sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <future>
#include <iostream>
#include <thread>

#include "backends/channel/sandbox_path.hpp"
#include "backends/policy/cpu_class.hpp"
#include "backends/channel/guest_proto.hpp"
#include "backends/vm/vm_template.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace proto = init_proto;
namespace gp = guest_proto;

namespace {

// A file call waits this long for the guest (a full 64 MiB write under TCG
// takes seconds).
constexpr int file_timeout_ms = 120000;
constexpr int migrate_timeout_ms = 120000;

// The checks a container's file call makes before resolving a path (the
// guest resolves in-root the same way, so only the shape is checked here).
status check_path(const std::string& path) {
  if (auto parts = parse_sandbox_path(path, path_form::entry); !parts)
    return parts.err();
  return {};
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

int64_t now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

} // namespace

vm_sandbox::vm_sandbox(std::shared_ptr<io_loop> loop, vm_parts parts)
  : loop_(std::move(loop)), parts_(std::move(parts)) {
  pid_ = parts_.qemu.pid;
}

vm_sandbox::~vm_sandbox() {
  std::lock_guard<std::mutex> g(m_);
  if (qemu_token_)
    loop_->remove(qemu_token_, parts_.qemu.pidfd.get());
}

status vm_sandbox::start() {
  exit_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!exit_event_)
    return sys_error("eventfd", parts_.id, errno);
  channel_parts cp;
  cp.id = parts_.id;
  cp.reap = false; // the "init" the channel watches is our eventfd
  cp.pidfd.reset(::fcntl(exit_event_.get(), F_DUPFD_CLOEXEC, 0));
  cp.ctl = std::move(parts_.ctl_node);
  cp.env = parts_.env;
  channel_ = std::make_shared<init_channel>(loop_, std::move(cp));
  if (auto st = channel_->start(); !st)
    return st;
  std::lock_guard<std::mutex> g(m_);
  watch_qemu_locked();
  return qemu_token_ ? status{} : sys_error("epoll add", "qemu pidfd of " + parts_.id, errno);
}

void vm_sandbox::watch_qemu_locked() {
  std::weak_ptr<vm_sandbox> weak = shared_from_this();
  qemu_token_ = loop_->add(parts_.qemu.pidfd.get(), EPOLLIN, [weak](uint32_t) {
    if (auto self = weak.lock())
      self->on_qemu_exit();
  });
}

// The guest ended on its own (agent died and PID 1 powered off, a guest
// panic, QEMU killed): tell the channel through the eventfd.
void vm_sandbox::on_qemu_exit() {
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_ || !qemu_token_)
      return;
    loop_->remove(qemu_token_, parts_.qemu.pidfd.get());
    qemu_token_ = 0;
    siginfo_t si{};
    std::string how;
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(parts_.qemu.pidfd.get()),
                 &si, WEXITED | WNOHANG) == 0 && si.si_pid != 0)
      how = si.si_code == CLD_EXITED ? "exit status " + std::to_string(si.si_status)
                                     : std::string("signal ") + strsignal(si.si_status);
    died_of_ = "guest exited (qemu " + how + ")";
    auto tail = log_tail(parts_.machine.console_log, 200);
    if (!tail.empty())
      died_of_ += "; console: " + tail;
  }
  uint64_t one = 1;
  (void)!::write(exit_event_.get(), &one, sizeof one);
}

void vm_sandbox::on_exit(std::function<void(std::string)> f) {
  std::weak_ptr<vm_sandbox> weak = shared_from_this();
  channel_->on_exit([weak, f = std::move(f)](std::string reason) {
    auto self = weak.lock();
    if (!self)
      return;
    {
      std::lock_guard<std::mutex> g(self->m_);
      if (self->destroying_)
        return;
      if (!self->died_of_.empty())
        reason = self->died_of_;
    }
    f(std::move(reason));
  });
}

// -- files ----------------------------------------------------------------------

expected<std::string> vm_sandbox::file_call(const std::string& frame, const std::string& what) {
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_)
      return unavailable(what + " in " + parts_.id + ": sandbox destroyed");
    if (paused_)
      return unavailable(what + " in " + parts_.id + ": sandbox is paused");
    if (!died_of_.empty())
      return unavailable(what + " in " + parts_.id + ": " + died_of_);
  }
  proto::header h;
  if (proto::peek_frame(frame, h) != proto::parse::complete)
    return internal_error(what + ": bad request frame");
  int fd = parts_.files_node.get();
  if (!send_all(fd, frame))
    return unavailable(what + " in " + parts_.id + ": file channel closed");
  std::string in;
  char buf[65536];
  int64_t deadline = now_ms() + file_timeout_ms;
  for (;;) {
    proto::header r;
    auto p = proto::peek_frame(in, r);
    if (p == proto::parse::invalid)
      return internal_error(what + " in " + parts_.id + ": malformed answer from the guest");
    if (p == proto::parse::complete) {
      if (r.id == h.id)
        return in.substr(0, proto::header_size + r.length);
      in.erase(0, proto::header_size + r.length); // a late answer to a timed-out call
      continue;
    }
    int left = static_cast<int>(deadline - now_ms());
    if (left <= 0)
      return error{errc::timeout, what + " in " + parts_.id + ": the guest did not answer"};
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, left) < 0 && errno != EINTR)
      return sys_error("poll", "file channel of " + parts_.id, errno);
    auto n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0)
      in.append(buf, static_cast<size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      return unavailable(what + " in " + parts_.id + ": file channel closed");
  }
}

namespace {

error file_error(std::string_view frame, const std::string& path) {
  proto::reader r(frame.substr(proto::header_size));
  auto kind = static_cast<gp::err_kind>(r.u8());
  int e = static_cast<int>(r.u32());
  auto what = r.str();
  auto size = r.u64();
  if (!r.done())
    return internal_error("file " + path + ": malformed answer from the guest");
  if (kind == gp::err_kind::not_regular)
    return invalid_argument(what + ": not a regular file");
  if (kind == gp::err_kind::too_large)
    return too_large(what + ": " + std::to_string(size) + " bytes, limit exceeded");
  auto sp = what.find(' ');
  return sys_error(what.substr(0, sp), sp == std::string::npos ? "" : what.substr(sp + 1), e,
                   file_errc(e));
}

} // namespace

status vm_sandbox::write_file(const std::string& path, std::string_view data, uint32_t mode) {
  if (auto st = check_path(path); !st)
    return st;
  if (data.size() + path.size() + 64 > proto::max_body)
    return too_large("write " + path + ": larger than " + std::to_string(proto::max_body >> 20) +
                     " MiB, the guest channel's limit");
  std::lock_guard<std::mutex> op(op_m_);
  auto frame = proto::writer(gp::put, next_file_id_++).str(path).u32(mode).str(data).finish();
  auto reply = file_call(frame, "write " + path);
  if (!reply)
    return reply.err();
  proto::header h;
  proto::peek_frame(*reply, h);
  if (h.type == gp::file_ok)
    return {};
  if (h.type == gp::file_err)
    return file_error(*reply, path);
  return internal_error("write " + path + ": unexpected answer from the guest");
}

expected<std::string> vm_sandbox::read_file(const std::string& path, size_t max_bytes) {
  if (auto st = check_path(path); !st)
    return st.err();
  max_bytes = std::min<size_t>(max_bytes, proto::max_body - 64);
  std::lock_guard<std::mutex> op(op_m_);
  auto frame = proto::writer(gp::get, next_file_id_++).str(path).u64(max_bytes).finish();
  auto reply = file_call(frame, "read " + path);
  if (!reply)
    return reply.err();
  proto::header h;
  proto::peek_frame(*reply, h);
  if (h.type == gp::file_err)
    return file_error(*reply, path);
  proto::reader r(std::string_view(*reply).substr(proto::header_size));
  auto data = r.str();
  if (h.type != gp::file_data || !r.done())
    return internal_error("read " + path + ": unexpected answer from the guest");
  return data;
}

// -- usage -------------------------------------------------------------------------

/// Blocking (a pool thread): the guest kernel's busy CPU time, ns, or -1 if
/// the guest did not answer within a second.
int64_t vm_sandbox::guest_cpu_ns() {
  auto ch = channel_;
  if (!ch)
    return -1;
  auto answer = std::make_shared<std::promise<int64_t>>();
  auto got = answer->get_future();
  ch->cpu_time([answer](expected<int64_t> ns) { answer->set_value(ns ? *ns : -1); });
  if (got.wait_for(std::chrono::seconds(1)) != std::future_status::ready)
    return -1;
  return got.get();
}

expected<usage_sample> vm_sandbox::usage() {
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_)
      return unavailable("measure usage of " + parts_.id + ": sandbox destroyed");
    if (paused_)
      return usage_sample{};
  }
  int pid = pid_.load();
  auto status = sys::read_file("/proc/" + std::to_string(pid) + "/status");
  auto stat = sys::read_file("/proc/" + std::to_string(pid) + "/stat");
  if (pid <= 0 || !status || !stat)
    return unavailable("measure usage of " + parts_.id + ": its QEMU is gone");
  auto kb = [&](const char* key) -> int64_t {
    auto pos = status->find(key);
    return pos == std::string::npos ? 0 : std::atoll(status->c_str() + pos + std::strlen(key)) * 1024;
  };
  usage_sample u;
  u.resident_bytes = kb("VmRSS:");
  u.swap_bytes = kb("VmSwap:");
  // Fields 14 and 15 (utime, stime) in clock ticks, after the ")" that ends
  // the command name.
  auto rest = stat->substr(stat->rfind(')') + 2);
  long long ticks[2] = {0, 0};
  size_t field = 3, at = 0;
  while (field < 14 && (at = rest.find(' ', at)) != std::string::npos)
    ++at, ++field;
  if (field == 14)
    std::sscanf(rest.c_str() + at, "%lld %lld", &ticks[0], &ticks[1]);
  u.cpu_ns = (ticks[0] + ticks[1]) * (1000000000LL / ::sysconf(_SC_CLK_TCK));
  // The guest's own count is the sandbox's CPU: an idle TCG guest still
  // costs its QEMU a few per cent of a core, which would never read as
  // idle. QEMU's time stays the answer if the guest does not answer soon.
  if (auto guest = guest_cpu_ns(); guest >= 0)
    u.cpu_ns = guest;
  return u;
}

// -- pause, resume, destroy ----------------------------------------------------------

// Stop, save the machine (RAM, devices; the upper disk stays in its image
// file, everything written) to <dir>/state with QEMU 7.2's exec:
// migration, end QEMU: a paused guest holds no host memory but its files.
status vm_sandbox::pause() {
  std::lock_guard<std::mutex> op(op_m_);
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_)
      return unavailable("pause " + parts_.id + ": sandbox destroyed");
    if (paused_)
      return {};
    if (!died_of_.empty())
      return unavailable("pause " + parts_.id + ": " + died_of_);
  }
  // A batch QEMU saves at normal priority: at SCHED_IDLE under the idle
  // group a busy host would starve the save past its deadline. QEMU ends
  // next; resume puts the new one back in the class.
  if (cpu_class_ != "latency")
    (void)place_process_in_class(parts_.qemu.pid, parts_.cgroup_root, parts_.node_id, parts_.id,
                                 "latency");
  auto state = parts_.dir + "/state";
  qmp_client q(parts_.qemu.qmp.get(), parts_.qemu.qmp_ready);
  auto fail = [&](const error& e) -> status {
    if (cpu_class_ != "latency") // it runs on in its class
      (void)place_process_in_class(parts_.qemu.pid, parts_.cgroup_root, parts_.node_id,
                                   parts_.id, cpu_class_);
    (void)q.command(R"({"execute":"cont"})");
    parts_.qemu.qmp_ready = q.ready();
    ::unlink(state.c_str());
    return error{e.code, "pause " + parts_.id + ": " + e.message};
  };
  if (auto r = q.command(R"({"execute":"stop"})"); !r)
    return fail(r.err());
  // A template clone restored with x-ignore-shared on; its RAM is private
  // (share=off), so all of it goes into the file either way, but the
  // resuming QEMU checks that the capability matches.
  if (!parts_.machine.mem_path.empty())
    if (auto r = q.command(R"({"execute":"migrate-set-capabilities","arguments":{"capabilities":)"
                           R"([{"capability":"x-ignore-shared","state":false}]}})");
        !r)
      return fail(r.err());
  if (auto r = q.command(R"({"execute":"migrate","arguments":{"uri":"exec:cat > )" + state +
                         R"("}})");
      !r)
    return fail(r.err());
  for (int64_t deadline = now_ms() + migrate_timeout_ms;;) {
    auto r = q.command(R"({"execute":"query-migrate"})");
    if (!r)
      return fail(r.err());
    if (r->find("\"completed\"") != std::string::npos)
      break;
    if (r->find("\"failed\"") != std::string::npos || now_ms() > deadline)
      return fail(internal_error("saving the machine failed: " + *r));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard<std::mutex> g(m_);
    loop_->remove(qemu_token_, parts_.qemu.pidfd.get());
    qemu_token_ = 0;
    paused_ = true;
    // The state file holds all of RAM: a clone resumes on anonymous memory
    // (the RAM block keeps its name, "mem"), free of its template's file.
    parts_.machine.mem_path.clear();
  }
  (void)q.command(R"({"execute":"quit"})", 2000);
  pollfd pfd{parts_.qemu.pidfd.get(), POLLIN, 0};
  ::poll(&pfd, 1, 5000);
  stop_qemu(parts_.qemu);
  // An empty cpu group while paused would look stale to a starting node;
  // resume makes it again.
  remove_process_cpu_dir(parts_.cgroup_root, parts_.node_id, parts_.id);
  return {};
}

// A new QEMU with the same machine line, restoring <dir>/state; the guest
// runs on where it stopped, on the same channels.
status vm_sandbox::resume() {
  std::lock_guard<std::mutex> op(op_m_);
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_)
      return unavailable("resume " + parts_.id + ": sandbox destroyed");
    if (!paused_)
      return {};
  }
  auto state = parts_.dir + "/state";
  auto q = start_qemu(qemu_argv(parts_.machine, state), parts_.ctl_guest.get(),
                      parts_.files_guest.get(), parts_.dir + "/qemu.log");
  if (!q)
    return error{q.err().code, "resume " + parts_.id + ": " + q.err().message};
  // A node that stops kills it; the restore below then fails at once.
  inflight_qemus::guard watch;
  if (parts_.inflight)
    watch = parts_.inflight->watch(q->pidfd.get());
  qmp_client c(q->qmp.get());
  // The machine was saved stopped, so it loads as "paused" (QEMU restores
  // the run state): wait for the load to complete, then `cont`.
  for (int64_t deadline = now_ms() + migrate_timeout_ms;;) {
    auto r = c.command(R"({"execute":"query-migrate"})");
    bool loaded = r && r->find("\"completed\"") != std::string::npos;
    if (loaded)
      r = c.command(R"({"execute":"cont"})");
    if (loaded && r)
      break;
    bool failed = r && r->find("\"failed\"") != std::string::npos;
    if (!r || failed || now_ms() > deadline) {
      auto why = r ? "restore did not finish: " + *r : r.err().message;
      stop_qemu(*q);
      if (parts_.inflight && parts_.inflight->stopping())
        return inflight_qemus::stopping_error("resume " + parts_.id);
      return internal_error("resume " + parts_.id + ": " + why + "; qemu: " +
                            log_tail(parts_.dir + "/qemu.log"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::unlink(state.c_str());
  q->qmp_ready = c.ready();
  // The guest's clock stood still while it was paused. Best effort: the
  // guest runs and serves execs either way.
  if (auto st = send_guest_identity(parts_.files_node.get(), q->pidfd.get(), 10000); !st)
    std::cerr << "dsec node: resume " << parts_.id << ": " << st.err().message << std::endl;
  std::lock_guard<std::mutex> g(m_);
  parts_.qemu = std::move(*q);
  pid_ = parts_.qemu.pid;
  paused_ = false;
  watch_qemu_locked();
  if (cpu_class_ != "latency")
    if (auto st = place_process_in_class(parts_.qemu.pid, parts_.cgroup_root, parts_.node_id,
                                         parts_.id, cpu_class_);
        !st)
      std::cerr << "dsec node: resume " << parts_.id << ": " << st.err().message << std::endl;
  return {};
}

status vm_sandbox::set_cpu_class(const std::string& cls) {
  auto p = cpu_class_params_of(cls);
  if (!p)
    return p.err();
  std::lock_guard<std::mutex> op(op_m_);
  pid_t pid;
  {
    std::lock_guard<std::mutex> g(m_);
    if (destroying_)
      return unavailable("set cpu class of " + parts_.id + ": sandbox destroyed");
    cpu_class_ = cls;
    if (paused_) // no QEMU now: resume applies it
      return {};
    pid = parts_.qemu.pid;
  }
  if (auto st = place_process_in_class(pid, parts_.cgroup_root, parts_.node_id, parts_.id, cls);
      !st)
    return error{st.err().code, "set cpu class of " + parts_.id + ": " + st.err().message};
  return {};
}

status vm_sandbox::destroy() {
  {
    std::lock_guard<std::mutex> g(m_);
    if (!destroying_) {
      destroying_ = true;
      if (qemu_token_)
        loop_->remove(qemu_token_, parts_.qemu.pidfd.get());
      qemu_token_ = 0;
      // Wakes a file call blocked on a hung guest.
      ::shutdown(parts_.files_node.get(), SHUT_RDWR);
    }
  }
  std::lock_guard<std::mutex> op(op_m_); // a second destroy waits for the first
  if (!channel_)
    return {};
  stop_qemu(parts_.qemu);
  remove_process_cpu_dir(parts_.cgroup_root, parts_.node_id, parts_.id);
  pid_ = -1;
  uint64_t one = 1;
  (void)!::write(exit_event_.get(), &one, sizeof one); // the channel's "init" is gone
  status st;
  if (channel_->shut()) { // the first destroy: remove <dir>, fail pending execs
    st = sys::remove_tree(parts_.dir);
    channel_->fail_pending_later();
  }
  // A spare's upper disk that could not be moved into <dir> (adopt_spare).
  if (!parts_.machine.upper.empty() && parts_.machine.upper.rfind(parts_.dir + "/", 0) != 0)
    ::unlink(parts_.machine.upper.c_str());
  parts_.ctl_guest.reset();
  parts_.files_guest.reset();
  parts_.files_node.reset();
  return st;
}

} // namespace dsec::backends
