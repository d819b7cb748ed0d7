// Idle upstream connections of ports (issue 26 part 3), kept alive for the
// next request to the same place: a port of one sandbox (keyed by the
// sandbox's id, its backend handle and the port) or an owner node's REST
// port. A relay (actors/http_relay.cpp) takes one before dialing and gives
// it back once an answer ended cleanly on a keep-alive connection.
//
// Bounded and leaving nothing behind: at most `per_key` idle connections per
// place and `total` in all (the oldest goes first); an idle connection is
// closed after `idle_for`, at once when its far end closes or sends anything
// (a destroyed sandbox's processes die and close theirs; a microVM's init
// channel closing ends its streams), and forget() closes a sandbox's at
// once. Runs on the HTTP server's Asio thread; only http_relay.cpp includes
// this header.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <unistd.h>

namespace dsec::relay {

class upstream_pool {
 public:
  static constexpr size_t per_key = 8;
  static constexpr size_t total = 256;
  static constexpr std::chrono::seconds idle_for{5};

  using executor = boost::asio::any_io_executor;

  /// The pool of the server whose Asio thread runs `ex` (one per io_context).
  static upstream_pool& of(const executor& ex) {
    std::lock_guard<std::mutex> lock(pools_m());
    auto& p = pools()[context_of(ex)];
    if (!p)
      p.reset(new upstream_pool);
    return *p;
  }

  /// Closes the idle connections of the server whose Asio thread ran `ex`,
  /// once that thread has ended (http_server's stop()).
  static void close_all(const executor& ex) {
    std::unique_ptr<upstream_pool> p;
    {
      std::lock_guard<std::mutex> lock(pools_m());
      auto it = pools().find(context_of(ex));
      if (it == pools().end())
        return;
      p = std::move(it->second);
      pools().erase(it);
    }
    p->forget("");
  }

  /// An idle connection to `key` (its fd, the caller owns it), or -1.
  int take(const std::string& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end() || it->second.empty())
      return -1;
    auto e = it->second.back(); // the newest: the least likely closed meanwhile
    it->second.pop_back();
    if (it->second.empty())
      by_key_.erase(it);
    return release(*e);
  }

  /// Keeps `fd` (connected to `key`, its answer fully read) idle.
  void put(const executor& ex, const std::string& key, int fd) {
    if (count_ >= total)
      drop_oldest();
    auto& q = by_key_[key];
    if (q.size() >= per_key)
      close(q, q.begin());
    auto e = std::make_shared<entry>(ex, fd, key, ++serial_);
    q.push_back(e);
    ++count_;
    e->conn.async_wait(boost::asio::posix::descriptor_base::wait_read,
                       [this, e](boost::system::error_code ec) {
                         if (ec != boost::asio::error::operation_aborted)
                           expire(e);
                       });
    e->timer.expires_after(idle_for);
    e->timer.async_wait([this, e](boost::system::error_code ec) {
      if (!ec)
        expire(e);
    });
  }

  /// Closes every idle connection whose key starts with `prefix`.
  void forget(const std::string& prefix) {
    for (auto it = by_key_.begin(); it != by_key_.end();) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) {
        ++it;
        continue;
      }
      while (!it->second.empty())
        close(it->second, it->second.begin());
      it = by_key_.erase(it);
    }
  }

  size_t idle() const { return count_; }

 private:
  struct entry {
    entry(const executor& ex, int fd, std::string k, uint64_t s)
      : conn(ex, fd), timer(ex), key(std::move(k)), serial(s) {}
    boost::asio::posix::stream_descriptor conn;
    boost::asio::steady_timer timer;
    std::string key;
    uint64_t serial;
    bool gone = false;
  };
  using queue = std::deque<std::shared_ptr<entry>>;

  int release(entry& e) {
    e.gone = true;
    --count_;
    boost::system::error_code ignored;
    e.timer.cancel();
    e.conn.cancel(ignored);
    return e.conn.release();
  }

  void close(queue& q, queue::iterator at) {
    auto e = *at;
    q.erase(at);
    int fd = release(*e);
    if (fd >= 0)
      ::close(fd);
  }

  /// The far end closed, spoke out of turn, or the idle time ran out.
  void expire(const std::shared_ptr<entry>& e) {
    if (e->gone)
      return;
    auto it = by_key_.find(e->key);
    if (it == by_key_.end())
      return;
    for (auto at = it->second.begin(); at != it->second.end(); ++at)
      if (*at == e) {
        close(it->second, at);
        break;
      }
    if (it->second.empty())
      by_key_.erase(it);
  }

  void drop_oldest() {
    auto oldest = by_key_.end();
    for (auto it = by_key_.begin(); it != by_key_.end(); ++it)
      if (!it->second.empty()
          && (oldest == by_key_.end() || it->second.front()->serial < oldest->second.front()->serial))
        oldest = it;
    if (oldest == by_key_.end())
      return;
    close(oldest->second, oldest->second.begin());
    if (oldest->second.empty())
      by_key_.erase(oldest);
  }

  static const void* context_of(const executor& ex) {
    return &boost::asio::query(ex, boost::asio::execution::context);
  }
  static std::map<const void*, std::unique_ptr<upstream_pool>>& pools() {
    static std::map<const void*, std::unique_ptr<upstream_pool>> p;
    return p;
  }
  static std::mutex& pools_m() {
    static std::mutex m;
    return m;
  }

  std::unordered_map<std::string, queue> by_key_;
  size_t count_ = 0;
  uint64_t serial_ = 0;
};

} // namespace dsec::relay
