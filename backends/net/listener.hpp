// listener: the skeleton the node's sandbox-facing servers share (the DNS
// resolver, dns_resolver.hpp, and the SNI/Host check, name_proxy.hpp): a
// loop thread woken for shutdown by an eventfd, a bounded set of threads
// that serve one connection each and are reaped as they end, and the
// blocking socket reads and writes those threads make. Nothing here runs on
// a CAF thread; stop() shuts every socket down and joins every thread, so a
// stopped server leaves no thread, fd or socket behind.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace dsec::net {

// -- blocking socket I/O ---------------------------------------------------------

/// Sends all `n` bytes (MSG_NOSIGNAL); false on error or a closed peer.
bool write_all(int fd, const uint8_t* p, size_t n);

/// Receives exactly `n` bytes; false on error, timeout or end of stream.
bool read_full(int fd, uint8_t* p, size_t n);

/// SO_RCVTIMEO and SO_SNDTIMEO of `seconds`.
void set_timeouts(int fd, int seconds);

// -- the loop thread ----------------------------------------------------------------

/// One thread running a server's poll loop, which polls wake_fd() beside its
/// own sockets and returns once stopping() is true.
class loop_thread {
 public:
  loop_thread();
  ~loop_thread() { stop(); }
  loop_thread(const loop_thread&) = delete;
  loop_thread& operator=(const loop_thread&) = delete;

  /// False if the eventfd could not be made (errno says why).
  bool ok() const { return wake_ >= 0; }
  /// Starts `body` on the thread.
  void start(std::function<void()> body);
  /// Sets stopping(), wakes the loop's poll and joins it. Idempotent.
  void stop();

  int wake_fd() const { return wake_; }
  bool stopping() const { return stop_; }

 private:
  int wake_ = -1;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

// -- one thread per connection --------------------------------------------------------

/// At most `max` connections served at once, each on a thread of its own.
class conn_threads {
 public:
  /// One connection: the accepted socket and, once the server made it, a
  /// second socket (an upstream) that stop() shuts down with it.
  struct conn {
    int client = -1;
    std::atomic<int> other{-1};
  };

  explicit conn_threads(size_t max) : max_(max) {}
  ~conn_threads() { stop(); }
  conn_threads(const conn_threads&) = delete;
  conn_threads& operator=(const conn_threads&) = delete;

  /// Serves accepted socket `fd` with `serve` on a new thread, then closes
  /// it (and `other`, if set). False, with `fd` closed at once, when `max`
  /// connections are being served or stop() was called (fail closed).
  bool spawn(int fd, std::function<void(conn&)> serve);

  /// Joins the threads whose connection ended (the accept loop, each turn).
  void reap();

  /// Shuts every socket down, so blocked reads return, and joins every
  /// thread. Idempotent; later spawn() calls refuse.
  void stop();

 private:
  struct slot {
    conn c;
    std::thread t;
    bool done = false; ///< under m_
  };
  size_t max_;
  std::mutex m_;
  std::list<slot> slots_;
  bool stopped_ = false;
};

} // namespace dsec::net
