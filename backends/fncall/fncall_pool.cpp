// FnCall pool implementation (see fncall_pool.hpp): workers, the I/O thread
// that moves frames and watches deadlines, and the manager thread that
// creates, replaces and retires worker sandboxes.
//
// One mutex guards every worker and the queue. Completion callbacks run after
// it is released, so a callback may submit again.
#include "backends/fncall/fncall_pool.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "backends/fncall/fncall_connect.hpp"
#include "backends/fncall/fncall_wire.hpp"
#include "core/validate.hpp"
#include "sys/fd.hpp"

namespace dsec::backends::fncall {

namespace {

using clock = std::chrono::steady_clock;

/// Inside the sandbox; unlinked by the server once the node is connected.
constexpr const char* socket_path = "/dev/shm/fncall-server.sock";
/// Python start + preload takes ~100-300 ms; a server not listening after
/// this is broken (the worker is given up, the pool retries later).
constexpr auto server_start_timeout = std::chrono::seconds(20);

/// Directories the agent's code can read but never change (the pool
/// sandbox's protect.readonly). /tmp, /dev/shm stay writable and are wiped
/// after each call; "/" and /dev are watched by the server.
const std::vector<std::string> readonly_paths = {"/usr", "/etc", "/var", "/root", "/home",
                                                 "/opt", "/srv", "/mnt", "/media", "/boot",
                                                 "/run", "/work"};

struct call {
  fncall_request req;
  done_fn done;
  clock::time_point submitted;
};

struct worker {
  /// cleaning: answered, the server is resetting the sandbox and forking
  /// the next call's process; it says "clean" when the next call may come.
  enum state_t { starting, idle, busy, cleaning, dead };
  uint64_t serial = 0;
  std::string id;
  std::shared_ptr<sandbox> sb;
  std::vector<std::string> digests;
  sys::unique_fd sock;
  state_t state = starting;
  std::string in, out;
  size_t out_off = 0;
  call current;
  /// The server acknowledged `current`: if it dies now, the call may have run.
  bool acked = false;
  clock::time_point deadline{};
  clock::time_point last_used{};
  bool retire_queued = false;
};

using wptr = std::shared_ptr<worker>;
using completion = std::pair<done_fn, expected<exec_result>>;

class pool_impl final : public pool, public std::enable_shared_from_this<pool_impl> {
 public:
  pool_impl(std::shared_ptr<backend> b, pool_config cfg) : backend_(std::move(b)), cfg_(std::move(cfg)) {
    ep_.reset(::epoll_create1(EPOLL_CLOEXEC));
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  }

  ~pool_impl() override { shutdown(); }

  void run() {
    weak_this_ = shared_from_this();
    io_ = std::thread([this] { io_loop(); });
    manager_ = std::thread([this] { manage(); });
  }

  void submit(fncall_request req, done_fn done) override {
    if (auto st = dsec::validate(req); !st)
      return done(st.err());
    std::vector<completion> out;
    {
      std::lock_guard lk{mu_};
      if (stopping_)
        return done(unavailable("fncall: the node is shutting down"));
      if (queue_.size() >= cfg_.max_queue)
        return done(resource_exhausted("fncall: " + std::to_string(queue_.size())
                                       + " calls already wait for a worker; retry later"));
      used_ = true;
      queue_.push_back(call{std::move(req), std::move(done), clock::now()});
      dispatch(out);
      if (!queue_.empty())
        cv_.notify_all(); // the manager may grow the pool
    }
    finish(out);
  }

  pool_stats stats() override {
    std::lock_guard lk{mu_};
    pool_stats s;
    for (auto& [n, w] : workers_) {
      if (w->state == worker::idle || w->state == worker::busy || w->state == worker::cleaning) {
        ++s.workers;
        s.idle += w->state == worker::idle;
        s.init_pids.push_back(w->sb->init_pid());
      }
    }
    s.starting = starting_;
    s.queued = queue_.size();
    s.calls = calls_;
    s.replaced = replaced_;
    s.started = started_;
    return s;
  }

  void shutdown() override {
    std::vector<completion> out;
    {
      std::lock_guard lk{mu_};
      if (stopping_ && !io_.joinable() && !manager_.joinable())
        return;
      stopping_ = true;
      for (auto& c : queue_)
        out.emplace_back(std::move(c.done), unavailable("fncall: the node is shutting down"));
      queue_.clear();
      cv_.notify_all();
    }
    finish(out);
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
    if (manager_.joinable())
      manager_.join();
    if (io_.joinable())
      io_.join();
    std::vector<wptr> all;
    {
      std::lock_guard lk{mu_};
      for (auto& [n, w] : workers_) {
        if (w->state == worker::busy)
          out.emplace_back(std::move(w->current.done),
                           unavailable("fncall: the node is shutting down"));
        w->state = worker::dead;
        all.push_back(w);
      }
      workers_.clear();
    }
    finish(out);
    for (auto& w : all)
      destroy_worker(w);
  }

 private:
  // -- dispatch (mu_ held) ---------------------------------------------------

  /// Hands queued calls to idle workers, most recently used first so extra
  /// workers stay idle long enough to be retired.
  void dispatch(std::vector<completion>& out) {
    while (!queue_.empty()) {
      wptr best;
      for (auto& [n, w] : workers_)
        if (w->state == worker::idle && (!best || w->last_used > best->last_used))
          best = w;
      if (!best)
        return;
      best->current = std::move(queue_.front());
      queue_.pop_front();
      best->state = worker::busy;
      best->acked = false;
      best->out = encode_request(best->current.req);
      best->out_off = 0;
      best->deadline = clock::now()
                       + std::chrono::duration_cast<clock::duration>(
                         std::chrono::duration<double>(best->current.req.timeout_s))
                       + cfg_.grace;
      flush(best, out);
    }
  }

  /// Writes what the socket takes; the rest waits for EPOLLOUT.
  void flush(const wptr& w, std::vector<completion>& out) {
    while (w->out_off < w->out.size()) {
      auto n = ::send(w->sock.get(), w->out.data() + w->out_off, w->out.size() - w->out_off,
                      MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        w->out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == EAGAIN) {
        watch(w, EPOLLIN | EPOLLOUT);
        return;
      }
      return kill_worker(w, "send to the fork server: " + std::string{std::strerror(errno)}, out);
    }
    w->out.clear();
    w->out_off = 0;
    watch(w, EPOLLIN);
  }

  void watch(const wptr& w, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = w->serial;
    ::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, w->sock.get(), &ev);
  }

  /// Marks `w` dead, answers its call and queues it for the manager.
  void kill_worker(const wptr& w, const std::string& why, std::vector<completion>& out,
                   std::optional<exec_result> answer_with = std::nullopt) {
    if (w->state == worker::dead)
      return;
    if (w->state == worker::busy && !w->acked && !answer_with && !stopping_) {
      // The server died before it took the call: another worker runs it.
      queue_.push_front(std::move(w->current));
      w->current = call{};
      w->state = worker::idle;
    }
    if (w->state == worker::busy) {
      if (answer_with)
        out.emplace_back(std::move(w->current.done), std::move(*answer_with));
      else
        out.emplace_back(std::move(w->current.done),
                         unavailable("fncall: the worker died during the call (" + why + ")"));
      ++calls_;
    }
    if (w->state != worker::starting)
      ++replaced_;
    w->state = worker::dead;
    if (w->sock)
      ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, w->sock.get(), nullptr);
    std::cerr << "dsec node " << cfg_.node_id << ": fncall worker " << w->id << " retired: "
              << why << std::endl;
    retire(w);
  }

  void retire(const wptr& w) {
    if (!w->retire_queued) {
      w->retire_queued = true;
      retiring_.push_back(w);
    }
    cv_.notify_all();
  }

  void on_frame(const wptr& w, std::string_view frame, std::vector<completion>& out) {
    if (w->state == worker::busy && !w->acked && is_ack_frame(frame)) {
      w->acked = true;
      return;
    }
    if (w->state == worker::cleaning) {
      auto tainted = clean_frame_tainted(frame);
      if (!tainted)
        return kill_worker(w, "unexpected frame from the fork server", out);
      if (*tainted)
        return kill_worker(w, "the call left state behind (tainted)", out);
      w->state = worker::idle;
      return dispatch(out);
    }
    if (w->state != worker::busy || !w->acked)
      return kill_worker(w, "unexpected frame from the fork server", out);
    auto a = decode_answer(frame);
    if (!a)
      return kill_worker(w, a.err().message, out);
    ++calls_;
    auto& c = w->current;
    if (!a->error.empty()) {
      out.emplace_back(std::move(c.done), invalid_argument("fncall: " + a->error));
    } else {
      a->result.node_ms =
        std::chrono::duration<double, std::milli>(clock::now() - c.submitted).count();
      out.emplace_back(std::move(c.done), std::move(a->result));
    }
    c = call{};
    if (a->tainted || !a->error.empty()) {
      w->state = worker::idle; // answered: kill_worker answers busy workers only
      return kill_worker(w, a->tainted ? "the call left state behind (tainted)" : a->error, out);
    }
    w->state = worker::cleaning;
    w->last_used = clock::now();
    w->deadline = w->last_used + cfg_.grace;
  }

  static void finish(std::vector<completion>& out) {
    for (auto& [done, res] : out)
      if (done)
        done(std::move(res));
    out.clear();
  }

  // -- I/O thread ------------------------------------------------------------

  void io_loop() {
    epoll_event evs[64];
    std::vector<completion> out;
    while (true) {
      int timeout = -1;
      {
        std::lock_guard lk{mu_};
        if (stopping_)
          return;
        auto now = clock::now();
        for (auto& [n, w] : workers_)
          if (w->state == worker::busy || w->state == worker::cleaning) {
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(w->deadline - now).count() + 1;
            if (timeout < 0 || ms < timeout)
              timeout = ms < 0 ? 0 : int(ms);
          }
      }
      int n = ::epoll_wait(ep_.get(), evs, 64, timeout);
      std::unique_lock lk{mu_};
      if (stopping_)
        return;
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.u64 == 0) {
          uint64_t v;
          (void)!::read(wake_.get(), &v, sizeof v);
          continue;
        }
        auto it = workers_.find(evs[i].data.u64);
        if (it == workers_.end() || it->second->state == worker::dead)
          continue;
        auto w = it->second;
        if (evs[i].events & EPOLLOUT)
          flush(w, out);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
          read_from(w, out);
      }
      auto now = clock::now();
      for (auto& [k, w] : workers_) {
        if (w->state == worker::cleaning && now >= w->deadline)
          kill_worker(w, "no clean report within the grace period after a call", out);
        if (w->state == worker::busy && now >= w->deadline) {
          exec_result r;
          r.exit_code = 137;
          r.timed_out = true;
          r.duration_ms = w->current.req.timeout_s * 1000;
          r.stderr_data = "fncall: the call's worker stopped answering; it was replaced\n";
          kill_worker(w, "no answer within timeout_s + grace", out, r);
        }
      }
      dispatch(out); // calls a dead worker never took went back to the queue
      lk.unlock();
      finish(out);
    }
  }

  void read_from(const wptr& w, std::vector<completion>& out) {
    char buf[65536];
    while (w->state != worker::dead) {
      auto n = ::recv(w->sock.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        w->in.append(buf, static_cast<size_t>(n));
        size_t len;
        while (w->state != worker::dead && (len = frame_size(w->in)) > 0) {
          std::string frame = w->in.substr(0, len);
          w->in.erase(0, len);
          on_frame(w, frame, out);
        }
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == EAGAIN)
        return;
      return kill_worker(w, n == 0 ? "the fork server closed its connection"
                                   : "recv: " + std::string{std::strerror(errno)},
                         out);
    }
  }

  // -- manager thread --------------------------------------------------------

  void manage() {
    std::unique_lock lk{mu_};
    auto backoff_until = clock::now();
    while (!stopping_) {
      if (!retiring_.empty()) {
        auto batch = std::move(retiring_);
        retiring_.clear();
        lk.unlock();
        for (auto& w : batch)
          destroy_worker(w);
        lk.lock();
        for (auto& w : batch)
          workers_.erase(w->serial);
        continue;
      }
      size_t alive = 0, idle = 0;
      for (auto& [n, w] : workers_)
        if (w->state == worker::idle || w->state == worker::busy || w->state == worker::cleaning) {
          ++alive;
          idle += w->state == worker::idle;
        }
      // Grow while calls wait: the workers still resetting (and warming the
      // next call's process) would make them wait longer.
      bool want = ((used_ || cfg_.prewarm) && alive < cfg_.min_workers)
                  || (!queue_.empty() && idle == 0 && alive < cfg_.max_workers);
      if (want && clock::now() >= backoff_until) {
        ++starting_;
        lk.unlock();
        auto w = start_worker();
        lk.lock();
        --starting_;
        std::vector<completion> out;
        if (!w) {
          std::cerr << "dsec node " << cfg_.node_id << ": fncall: " << w.err().message << std::endl;
          backoff_until = clock::now() + std::chrono::seconds(1);
          if (alive == 0) // nobody can serve the queue: say why now
            for (auto& c : queue_)
              out.emplace_back(std::move(c.done), unavailable(w.err().message));
          if (alive == 0)
            queue_.clear();
        } else if (stopping_) {
          retiring_.push_back(*w);
        } else {
          (*w)->state = worker::idle;
          (*w)->last_used = clock::now();
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = (*w)->serial;
          ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, (*w)->sock.get(), &ev);
          workers_[(*w)->serial] = *w;
          ++started_;
          dispatch(out);
        }
        lk.unlock();
        finish(out);
        lk.lock();
        continue;
      }
      // Shrink: one idle worker past idle_shrink while more than the minimum live.
      if (queue_.empty() && alive > cfg_.min_workers) {
        auto now = clock::now();
        for (auto& [n, w] : workers_)
          if (w->state == worker::idle && now - w->last_used >= cfg_.idle_shrink) {
            w->state = worker::dead;
            ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, w->sock.get(), nullptr);
            retire(w);
            break;
          }
        if (!retiring_.empty())
          continue;
      }
      cv_.wait_for(lk, want ? std::chrono::milliseconds(100) : std::chrono::milliseconds(500));
    }
    auto batch = std::move(retiring_);
    retiring_.clear();
    lk.unlock();
    for (auto& w : batch)
      destroy_worker(w);
  }

  /// Creates a sandbox, starts the fork server in it and connects. Blocking.
  expected<wptr> start_worker() {
    auto w = std::make_shared<worker>();
    w->serial = ++serial_;
    std::random_device rd;
    char suffix[17];
    std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
    w->id = cfg_.node_id + ".fncall-" + suffix;
    auto layers = cfg_.acquire(cfg_.layers);
    if (!layers)
      return error{errc::unavailable, "fncall: start a worker: " + layers.err().message};
    create_params p;
    p.id = w->id;
    p.spec.layers = cfg_.layers;
    p.spec.cpu = 1;
    p.spec.memory_mb = 512;
    p.spec.disk_mb = 512;
    p.spec.pids = 256;
    p.spec.ttl_s = 0;
    p.spec.protect.readonly = readonly_paths;
    p.spec.labels["dsec.fncall"] = "worker";
    p.lower_dirs = layers->dirs;
    p.dir = cfg_.sandboxes_dir + "/" + w->id;
    auto sb = backend_->create(p);
    if (!sb) {
      cfg_.release(layers->digests);
      return error{errc::unavailable, "fncall: start a worker: " + sb.err().message};
    }
    w->sb = *sb;
    w->digests = layers->digests;
    if (auto st = start_server(w); !st) {
      destroy_worker(w);
      return error{errc::unavailable, "fncall: start worker " + w->id + ": " + st.err().message};
    }
    return w;
  }

  status start_server(const wptr& w) {
    std::weak_ptr<pool_impl> weak = weak_this_;
    auto serial = w->serial;
    auto server_gone = std::make_shared<std::atomic<bool>>(false);
    auto died = [weak, serial, server_gone](std::string why) {
      server_gone->store(true);
      auto self = weak.lock();
      if (!self)
        return;
      std::vector<completion> out;
      {
        std::lock_guard lk{self->mu_};
        auto it = self->workers_.find(serial);
        if (it != self->workers_.end()) {
          self->kill_worker(it->second, why, out);
          self->dispatch(out);
        }
      }
      finish(out);
    };
    exec_request req;
    req.argv = {"/usr/bin/python3", "-c", fork_server_source, socket_path};
    exec_callbacks cb;
    cb.on_output = [](exec_chunk) {};
    cb.on_done = [died](expected<exec_result> r) {
      std::string tail = r ? r->stderr_data : r.err().message;
      if (tail.size() > 400)
        tail = tail.substr(tail.size() - 400);
      died("the fork server exited (" + (r ? std::to_string(r->exit_code) : std::string{"?"})
           + "): " + tail);
    };
    w->sb->on_exit([died](std::string why) { died("the sandbox died: " + why); });
    w->sb->exec(std::move(req), std::move(cb));
    auto sock = connect_fork_server(w->sb->init_pid(), socket_path,
                                    clock::now() + server_start_timeout, *server_gone);
    if (!sock)
      return sock.err();
    w->sock = std::move(*sock);
    return {};
  }

  void destroy_worker(const wptr& w) {
    w->sock.reset();
    if (w->sb) {
      if (auto st = w->sb->destroy(); !st)
        std::cerr << "dsec node " << cfg_.node_id << ": fncall: destroy " << w->id << ": "
                  << st.err().message << std::endl;
      w->sb.reset();
    }
    if (!w->digests.empty())
      cfg_.release(w->digests);
    w->digests.clear();
  }

  std::shared_ptr<backend> backend_;
  pool_config cfg_;
  std::weak_ptr<pool_impl> weak_this_;
  sys::unique_fd ep_, wake_;
  std::thread io_, manager_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  /// A call came: keep min_workers warm from now on.
  bool used_ = false;
  std::map<uint64_t, wptr> workers_;
  std::vector<wptr> retiring_;
  std::deque<call> queue_;
  std::atomic<uint64_t> serial_{0};
  size_t starting_ = 0;
  uint64_t calls_ = 0, replaced_ = 0, started_ = 0;
};

} // namespace

std::shared_ptr<pool> start_pool(std::shared_ptr<backend> b, pool_config cfg) {
  auto p = std::make_shared<pool_impl>(std::move(b), std::move(cfg));
  p->run();
  return p;
}

} // namespace dsec::backends::fncall
