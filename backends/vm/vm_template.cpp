// VM templates: made by booting, used by restoring (see vm_template.hpp).
#include "backends/vm/vm_template.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "backends/channel/guest_proto.hpp"
#include "backends/channel/protocol.hpp"
#include "backends/vm/upper_disk.hpp"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace proto = init_proto;
namespace gp = guest_proto;

namespace {

int64_t now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A failed template is tried again after this long.
constexpr int64_t retry_after_ms = 300000;

// Waits for query-migrate to say "completed" (either side of a migration).
// Reads what `fd` (a guest channel) has into `in`, waiting until
// `deadline` and watching QEMU's `pidfd`; errors start with `what`.
status read_channel(int fd, int pidfd, std::string& in, int64_t deadline, const std::string& what) {
  int left = static_cast<int>(deadline - now_ms());
  if (left <= 0)
    return error{errc::timeout, what + ": the guest did not answer in time"};
  pollfd fds[2] = {{fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
  if (::poll(fds, 2, left) < 0 && errno != EINTR)
    return sys_error("poll", what, errno);
  if (fds[0].revents & POLLIN) {
    char buf[4096];
    auto n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0)
      in.append(buf, static_cast<size_t>(n));
    else if (n == 0)
      return unavailable(what + ": channel closed");
  } else if (fds[1].revents & POLLIN) {
    return unavailable(what + ": qemu exited");
  }
  return {};
}

// Sends `frame` on the guest channel `fd` and reads frames until `answer`
// returns a status for one (nullopt: not ours, skipped). `only_answer`:
// anything after the answer in the same read is an error. Watches QEMU's
// `pidfd`; errors start with `what`.
using answer_fn = std::function<std::optional<status>(const proto::header&, std::string_view)>;
status send_and_await(int fd, int pidfd, const std::string& frame, int timeout_ms,
                      const std::string& what, bool only_answer, const answer_fn& answer) {
  if (::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size()))
    return sys_error(what + ": send", "guest channel", errno);
  std::string in;
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    proto::header h;
    auto p = proto::peek_frame(in, h);
    if (p == proto::parse::invalid)
      return internal_error(what + ": malformed frame from the guest");
    if (p == proto::parse::complete) {
      std::string body = in.substr(proto::header_size, h.length);
      in.erase(0, proto::header_size + h.length);
      if (auto st = answer(h, body)) {
        if (only_answer && !in.empty())
          return internal_error(what + ": unexpected frames after the answer");
        return *st;
      }
      continue;
    }
    if (auto st = read_channel(fd, pidfd, in, deadline, what); !st)
      return st;
  }
}

status await_migration(qmp_client& q, int timeout_ms) {
  for (int64_t deadline = now_ms() + timeout_ms;;) {
    auto r = q.command(R"({"execute":"query-migrate"})");
    if (!r)
      return r.err();
    if (r->find("\"completed\"") != std::string::npos)
      return {};
    if (r->find("\"failed\"") != std::string::npos || now_ms() > deadline)
      return internal_error("migration did not complete: " + *r);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
}

constexpr const char* ignore_shared_on =
  R"({"execute":"migrate-set-capabilities","arguments":{"capabilities":)"
  R"([{"capability":"x-ignore-shared","state":true}]}})";

} // namespace

vm_template::~vm_template() {
  if (!dir.empty())
    (void)sys::remove_tree(dir);
}

status send_guest_identity(int files, int pidfd, int timeout_ms, const std::string& hostname) {
  unsigned char seed[64];
  if (::getrandom(seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed))
    return sys_error("getrandom", "guest seed", errno);
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now_ns = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  // Id 0: the sandbox's own file calls count from 1, so a late answer to
  // one of them is told apart and skipped.
  auto frame = proto::writer(gp::identity, 0)
                 .u64(now_ns)
                 .str(std::string_view(reinterpret_cast<char*>(seed), sizeof seed))
                 .str(hostname)
                 .finish();
  return send_and_await(
    files, pidfd, frame, timeout_ms, "guest identity", false,
    [](const proto::header& h, std::string_view body) -> std::optional<status> {
      if (h.id == 0 && h.type == gp::file_ok)
        return status{};
      if (h.id == 0 && h.type == gp::file_err) {
        proto::reader r(body);
        r.u8();
        int e = static_cast<int>(r.u32());
        auto what = r.str();
        return status{sys_error("guest identity: " + what, "", e)};
      }
      return std::nullopt;
    });
}

expected<std::shared_ptr<vm_template>> make_vm_template(
  machine_spec m, const std::string& key, const std::string& dir, const std::string& config,
  const std::string& pristine_upper, const ready_waiter& await_ready,
  const std::function<void(int)>& started) {
  (void)sys::remove_tree(dir);
  if (auto st = sys::make_dirs(dir, 0700); !st)
    return st.err();
  auto t = std::make_shared<vm_template>();
  t->machine = m;
  t->key = key;
  t->dir = dir;
  t->mem = dir + "/mem";
  t->state = dir + "/state";
  t->upper = dir + "/upper.img";
  if (auto st = copy_image(pristine_upper, t->upper); !st)
    return error{st.err().code, "upper disk: " + st.err().message};
  m.upper = t->upper;
  t->machine.upper = t->upper;
  m.mem_path = t->mem;
  m.mem_shared = true;
  m.restored = false;
  m.console_log = dir + "/console.log";
  auto log = dir + "/qemu.log";
  int ctl[2], files[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
    return sys_error("socketpair", "template control channel", errno);
  sys::unique_fd ctl_node{ctl[0]}, ctl_guest{ctl[1]};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, files) != 0)
    return sys_error("socketpair", "template file channel", errno);
  sys::unique_fd files_node{files[0]}, files_guest{files[1]};
  if (::send(ctl_node.get(), config.data(), config.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(config.size()))
    return sys_error("send config to the template guest", dir, errno);
  auto q = start_qemu(qemu_argv(m), ctl_guest.get(), files_guest.get(), log);
  if (!q)
    return error{q.err().code, "start qemu: " + q.err().message};
  if (started)
    started(q->pidfd.get());
  auto fail = [&](const std::string& step, const error& e) -> error {
    stop_qemu(*q);
    auto tail = log_tail(log);
    auto console = log_tail(m.console_log, 200);
    return error{e.code, step + ": " + e.message + (tail.empty() ? "" : "; qemu: " + tail) +
                           (console.empty() ? "" : "; console: " + console)};
  };
  // The agent set up and waits for its first request: the point every
  // clone starts from.
  if (auto st = await_ready(ctl_node.get(), q->pidfd.get()); !st)
    return fail("boot", st.err());
  qmp_client c(q->qmp.get());
  if (auto r = c.command(R"({"execute":"stop"})"); !r)
    return fail("stop", r.err());
  if (auto r = c.command(ignore_shared_on); !r)
    return fail("set x-ignore-shared", r.err());
  if (auto r = c.command(R"({"execute":"migrate","arguments":{"uri":"exec:cat > )" + t->state +
                         R"("}})");
      !r)
    return fail("save device state", r.err());
  if (auto st = await_migration(c, 60000); !st)
    return fail("save device state", st.err());
  (void)c.command(R"({"execute":"quit"})", 2000);
  pollfd pfd{q->pidfd.get(), POLLIN, 0};
  ::poll(&pfd, 1, 5000);
  stop_qemu(*q);
  struct stat st;
  if (::stat(t->state.c_str(), &st) != 0 || st.st_size == 0)
    return internal_error("save device state: " + t->state + " is missing or empty");
  return t;
}

expected<qemu_process> start_vm_clone(const vm_template& t, machine_spec& m, int ctl, int files,
                                      const std::string& upper, const std::string& log,
                                      int timeout_ms,
                                      const std::function<void(int)>& started) {
  if (auto st = copy_image(t.upper, upper); !st)
    return error{st.err().code, "upper disk: " + st.err().message};
  m.upper = upper;
  m.mem_path = t.mem;
  m.mem_shared = false;
  // microvm: no boot files. q35 keeps them: -kernel adds an option ROM,
  // a RAM block the state file names.
  m.restored = m.microvm;
  auto q = start_qemu(qemu_argv(m, "defer"), ctl, files, log, /*thp=*/false);
  if (!q) {
    ::unlink(upper.c_str());
    return error{q.err().code, "start qemu: " + q.err().message};
  }
  if (started)
    started(q->pidfd.get());
  qmp_client c(q->qmp.get());
  auto fail = [&](const std::string& step, const error& e) -> error {
    stop_qemu(*q);
    ::unlink(upper.c_str());
    auto tail = log_tail(log);
    return error{e.code, step + ": " + e.message + (tail.empty() ? "" : "; qemu: " + tail)};
  };
  // The source had x-ignore-shared on; QEMU checks that both sides agree.
  if (auto r = c.command(ignore_shared_on, timeout_ms); !r)
    return fail("set x-ignore-shared", r.err());
  if (auto r = c.command(R"({"execute":"migrate-incoming","arguments":{"uri":"exec:cat )" +
                         t.state + R"("}})");
      !r)
    return fail("load device state", r.err());
  if (auto st = await_migration(c, timeout_ms); !st)
    return fail("load device state", st.err());
  if (auto r = c.command(R"({"execute":"cont"})"); !r)
    return fail("cont", r.err());
  q->qmp_ready = c.ready();
  return q;
}

// -- spares ------------------------------------------------------------------------

vm_spare::~vm_spare() {
  stop_qemu(qemu);
  if (!log.empty())
    ::unlink(log.c_str());
  if (!machine.console_log.empty())
    ::unlink(machine.console_log.c_str());
  if (!machine.upper.empty())
    ::unlink(machine.upper.c_str());
}

namespace {

// Id of the warm-up exec: the sandbox's own execs count from 1.
constexpr uint32_t warm_exec_id = 0xffffffffu;

// Runs `true` in a clone and waits for its end (any exit: only the
// translation it causes matters).
status warm_up_exec(int ctl, int pidfd, int timeout_ms) {
  proto::exec_msg e;
  e.argv = {"true"};
  e.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  e.cwd = "/";
  e.timeout_ms = static_cast<uint64_t>(timeout_ms);
  auto frame = proto::encode(warm_exec_id, e);
  return send_and_await(ctl, pidfd, frame, timeout_ms, "warm-up exec", true,
                        [](const proto::header& h, std::string_view) -> std::optional<status> {
                          if (h.id == warm_exec_id &&
                              (h.type == proto::msg::done || h.type == proto::msg::exec_failed))
                            return status{};
                          return std::nullopt;
                        });
}

} // namespace

expected<std::unique_ptr<vm_spare>> make_vm_spare(const vm_template& t, const std::string& prefix,
                                                  int timeout_ms,
                                                  const std::function<void(int)>& started) {
  auto s = std::make_unique<vm_spare>();
  s->machine = t.machine;
  s->machine.console_log = prefix + ".console.log";
  s->log = prefix + ".qemu.log";
  int ctl[2], files[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
    return sys_error("socketpair", "control channel of spare " + prefix, errno);
  s->ctl_node.reset(ctl[0]);
  s->ctl_guest.reset(ctl[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, files) != 0)
    return sys_error("socketpair", "file channel of spare " + prefix, errno);
  s->files_node.reset(files[0]);
  s->files_guest.reset(files[1]);
  auto q = start_vm_clone(t, s->machine, s->ctl_guest.get(), s->files_guest.get(),
                          prefix + ".upper.img", s->log, timeout_ms, started);
  if (!q)
    return q.err();
  s->qemu = std::move(*q);
  // The identity path too (no hostname: the real one comes when taken).
  if (auto st = send_guest_identity(s->files_node.get(), s->qemu.pidfd.get(), timeout_ms); !st)
    return st.err();
  if (auto st = warm_up_exec(s->ctl_node.get(), s->qemu.pidfd.get(), timeout_ms); !st)
    return st.err();
  return s;
}

// -- cache -------------------------------------------------------------------------

template_cache::template_cache(std::string root, size_t max, std::string spare_dir,
                               size_t spares, int spare_timeout_ms, int64_t spare_idle_ms)
  : root_(std::move(root)), max_(max), spare_dir_(std::move(spare_dir)), spares_(spares),
    spare_timeout_ms_(spare_timeout_ms), spare_idle_ms_(std::max<int64_t>(spare_idle_ms, 100)) {
  (void)sys::remove_tree(root_); // a killed node's leftovers
  if (!spare_dir_.empty())
    (void)sys::remove_tree(spare_dir_);
  if (enabled() && spares_ > 0)
    spare_thread_ = std::thread([this] { spare_loop(); });
}

void template_cache::stop() {
  std::lock_guard<std::mutex> g(m_);
  stopping_ = true;
  cv_.notify_all();
  if (spare_pidfd_) // a spare being made: its calls fail at once
    ::syscall(SYS_pidfd_send_signal, spare_pidfd_.get(), SIGKILL, nullptr, 0);
  spare_cv_.notify_all();
}

template_cache::~template_cache() {
  stop();
  std::map<std::string, slot> gone;
  {
    std::lock_guard<std::mutex> g(m_);
    quit_ = true;
    gone.swap(slots_);
  }
  spare_cv_.notify_all();
  // Only now: the QEMUs it started (spares, and sandboxes that took one)
  // die with it (PR_SET_PDEATHSIG), and every sandbox is gone by now.
  if (spare_thread_.joinable())
    spare_thread_.join();
  gone.clear(); // kills the spares, removes the templates' files
  (void)sys::remove_tree(root_);
  if (!spare_dir_.empty())
    (void)sys::remove_tree(spare_dir_);
}

std::unique_ptr<vm_spare> template_cache::take_spare(const std::string& key, int wait_ms) {
  std::unique_lock<std::mutex> g(m_);
  auto it = slots_.find(key);
  if (it == slots_.end() || !it->second.t)
    return nullptr;
  if (it->second.spares.empty() && it->second.spare_building && !it->second.spare_claimed &&
      wait_ms > 0) {
    // Nearly there (a spare takes ~0.5 s): waiting beats a restore racing
    // it for the CPU. One create waits per spare; others restore.
    auto t = it->second.t;
    it->second.spare_claimed = true;
    auto same = [&] {
      auto i = slots_.find(key);
      return i != slots_.end() && i->second.t == t ? i : slots_.end();
    };
    cv_.wait_for(g, std::chrono::milliseconds(wait_ms), [&] {
      auto i = same();
      return stopping_ || i == slots_.end() || !i->second.spares.empty() ||
             !i->second.spare_building;
    });
    it = same();
    if (it == slots_.end())
      return nullptr;
    it->second.spare_claimed = false;
  }
  auto& spares = it->second.spares;
  std::unique_ptr<vm_spare> s;
  while (!s && !spares.empty()) {
    s = std::move(spares.front());
    spares.erase(spares.begin());
    pollfd dead{s->qemu.pidfd.get(), POLLIN, 0};
    if (::poll(&dead, 1, 0) != 0) // QEMU ended while idle
      s.reset();
  }
  spare_cv_.notify_all();
  return s;
}

void template_cache::spare_loop() {
  std::unique_lock<std::mutex> g(m_);
  while (!quit_) {
    if (stopping_) { // no more spares; the thread lives on (see the destructor)
      spare_cv_.wait(g, [&] { return quit_; });
      continue;
    }
    // A template no create used for spare_idle_ms_ keeps no spare (an
    // idle guest costs ~5% of a core under TCG); its next create brings
    // one back.
    int64_t now = now_ms();
    std::vector<std::unique_ptr<vm_spare>> idle;
    for (auto& [k, s] : slots_)
      if (now - s.used_at_ms >= spare_idle_ms_) {
        for (auto& sp : s.spares)
          idle.push_back(std::move(sp));
        s.spares.clear();
      }
    if (!idle.empty()) {
      g.unlock();
      idle.clear();
      g.lock();
      continue;
    }
    auto it = slots_.begin();
    for (; it != slots_.end(); ++it) {
      auto& s = it->second;
      if (s.t && s.spares.size() < spares_ && !s.spare_building &&
          now - s.used_at_ms < spare_idle_ms_ &&
          (s.spare_failed_at_ms == 0 || now - s.spare_failed_at_ms >= retry_after_ms))
        break;
    }
    if (it == slots_.end()) {
      spare_cv_.wait_for(g, std::chrono::milliseconds(std::min<int64_t>(spare_idle_ms_, 60000)));
      continue;
    }
    auto key = it->first;
    auto t = it->second.t;
    it->second.spare_building = true;
    auto prefix = spare_dir_ + "/" + t->dir.substr(t->dir.find_last_of('/') + 1) + "-" +
                  std::to_string(++spare_seq_);
    g.unlock();
    auto s = [&]() -> expected<std::unique_ptr<vm_spare>> {
      if (auto st = sys::make_dirs(spare_dir_, 0700); !st)
        return st.err();
      return make_vm_spare(*t, prefix, spare_timeout_ms_, [this](int pidfd) {
        std::lock_guard<std::mutex> l(m_);
        spare_pidfd_.reset(::fcntl(pidfd, F_DUPFD_CLOEXEC, 0));
        if (stopping_)
          ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
      });
    }();
    g.lock();
    spare_pidfd_.reset();
    auto at = slots_.find(key);
    bool same = at != slots_.end() && at->second.t == t;
    if (same)
      at->second.spare_building = false;
    cv_.notify_all(); // a create waiting for it
    if (!s) {
      if (same && !stopping_) {
        at->second.spare_failed_at_ms = now_ms();
        std::cerr << "dsec node: spare clone of vm template " << t->dir << ": "
                  << s.err().message << "; creates restore the template instead" << std::endl;
      }
      continue;
    }
    if (same && !stopping_) {
      at->second.spares.push_back(std::move(*s));
      at->second.spare_failed_at_ms = 0;
    } else {
      g.unlock();
      s->reset(); // its template went meanwhile
      g.lock();
    }
  }
}

std::shared_ptr<vm_template> template_cache::get(const std::string& key, const maker& make,
                                                 int wait_ms) {
  if (!enabled())
    return nullptr;
  std::unique_lock<std::mutex> g(m_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    if (stopping_)
      return nullptr;
    auto& s = slots_[key];
    s.used = ++clock_;
    s.used_at_ms = now_ms();
    if (s.t) {
      if (s.spares.empty() && !s.spare_building)
        spare_cv_.notify_all(); // it may have gone idle
      return s.t;
    }
    if (!s.failed.empty() && now_ms() - s.failed_at_ms < retry_after_ms)
      return nullptr;
    if (!s.building)
      break;
    if (cv_.wait_until(g, deadline) == std::cv_status::timeout)
      return nullptr;
  }
  slots_[key].building = true;
  std::string dir = root_ + "/" + [&] {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(key));
    return std::string(hex);
  }();
  g.unlock();
  if (auto st = sys::make_dirs(root_, 0700); !st) {
    g.lock();
    auto& s = slots_[key];
    s.building = false;
    s.failed = st.err().message;
    s.failed_at_ms = now_ms();
    cv_.notify_all();
    return nullptr;
  }
  auto t = make(dir);
  g.lock();
  auto& s = slots_[key];
  s.building = false;
  if (t) {
    s.t = *t;
    s.used_at_ms = now_ms(); // a boot may take longer than the spare idle time
    s.failed.clear();
    evict_locked();
    spare_cv_.notify_all();
  } else {
    (void)sys::remove_tree(dir);
    s.failed = t.err().message;
    s.failed_at_ms = now_ms();
    if (!stopping_) // else its QEMU was killed on purpose
      std::cerr << "dsec node: vm template " << dir << " (" << key
              << "): " << s.failed << "; creating by a normal boot" << std::endl;
  }
  cv_.notify_all();
  return t ? *t : nullptr;
}

void template_cache::drop(const std::string& key, const std::string& why) {
  std::lock_guard<std::mutex> g(m_);
  auto it = slots_.find(key);
  if (it == slots_.end() || !it->second.t)
    return;
  std::cerr << "dsec node: vm template " << it->second.t->dir << " dropped: " << why << std::endl;
  slots_.erase(it);
}

void template_cache::evict_locked() {
  size_t ready = 0;
  for (auto& [k, s] : slots_)
    ready += s.t ? 1 : 0;
  while (ready > max_) {
    auto oldest = slots_.end();
    for (auto it = slots_.begin(); it != slots_.end(); ++it)
      if (it->second.t && (oldest == slots_.end() || it->second.used < oldest->second.used))
        oldest = it;
    slots_.erase(oldest);
    --ready;
  }
}

} // namespace dsec::backends
