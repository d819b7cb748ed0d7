// VM templates: made by booting, used by restoring (see vm_template.hpp).
#include "backends/vm/vm_template.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <thread>

#include "backends/init/guest_proto.hpp"
#include "backends/init/protocol.hpp"
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
  if (::send(files, frame.data(), frame.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(frame.size()))
    return sys_error("send identity to the guest", "file channel", errno);
  std::string in;
  char buf[4096];
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    proto::header h;
    auto p = proto::peek_frame(in, h);
    if (p == proto::parse::invalid)
      return internal_error("guest identity: malformed answer on the file channel");
    if (p == proto::parse::complete) {
      auto body = std::string_view(in).substr(proto::header_size, h.length);
      if (h.id == 0 && h.type == gp::file_ok)
        return {};
      if (h.id == 0 && h.type == gp::file_err) {
        proto::reader r(body);
        r.u8();
        int e = static_cast<int>(r.u32());
        auto what = r.str();
        return sys_error("guest identity: " + what, "", e);
      }
      in.erase(0, proto::header_size + h.length);
      continue;
    }
    int left = static_cast<int>(deadline - now_ms());
    if (left <= 0)
      return error{errc::timeout, "guest identity: the guest did not answer within " +
                                    std::to_string(timeout_ms) + " ms"};
    pollfd fds[2] = {{files, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (::poll(fds, 2, left) < 0 && errno != EINTR)
      return sys_error("poll", "file channel", errno);
    if (fds[0].revents & POLLIN) {
      auto n = ::recv(files, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0)
        in.append(buf, static_cast<size_t>(n));
      else if (n == 0)
        return unavailable("guest identity: file channel closed");
    } else if (fds[1].revents & POLLIN) {
      return unavailable("guest identity: qemu exited");
    }
  }
}

expected<std::shared_ptr<vm_template>> make_vm_template(machine_spec m, const std::string& key,
                                                        const std::string& dir,
                                                        const std::string& config,
                                                        const ready_waiter& await_ready) {
  (void)sys::remove_tree(dir);
  if (auto st = sys::make_dirs(dir, 0700); !st)
    return st.err();
  auto t = std::make_shared<vm_template>();
  t->key = key;
  t->dir = dir;
  t->mem = dir + "/mem";
  t->state = dir + "/state";
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
                                      const std::string& log, int timeout_ms) {
  m.mem_path = t.mem;
  m.mem_shared = false;
  // microvm: no boot files. q35 keeps them: -kernel adds an option ROM,
  // a RAM block the state file names.
  m.restored = m.microvm;
  auto q = start_qemu(qemu_argv(m, "defer"), ctl, files, log);
  if (!q)
    return error{q.err().code, "start qemu: " + q.err().message};
  qmp_client c(q->qmp.get());
  auto fail = [&](const std::string& step, const error& e) -> error {
    stop_qemu(*q);
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

// -- cache -------------------------------------------------------------------------

template_cache::template_cache(std::string root, size_t max) : root_(std::move(root)), max_(max) {
  (void)sys::remove_tree(root_); // a killed node's leftovers
}

template_cache::~template_cache() {
  {
    std::lock_guard<std::mutex> g(m_);
    slots_.clear();
  }
  (void)sys::remove_tree(root_);
}

std::shared_ptr<vm_template> template_cache::get(const std::string& key, const maker& make,
                                                 int wait_ms) {
  if (!enabled())
    return nullptr;
  std::unique_lock<std::mutex> g(m_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    auto& s = slots_[key];
    s.used = ++clock_;
    if (s.t)
      return s.t;
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
    s.failed.clear();
    evict_locked();
  } else {
    (void)sys::remove_tree(dir);
    s.failed = t.err().message;
    s.failed_at_ms = now_ms();
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
