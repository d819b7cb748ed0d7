// Connections to other nodes' front doors, for an actor that calls them
// (placement, image fetch, the native client): connect on first use over
// CAF's middleman, queue the calls that wait for the connection, track the
// calls in flight, and fail all of them at once when the peer goes down (its
// down message) or is dropped (it left the cluster), so no caller waits for a
// timeout on a dead node. The next call after a drop connects again.
//
// Header-only: it is a template over the owning actor and the peer's handle
// type, and only CAF translation units include it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "actors/caf_error.hpp"
#include "core/error.hpp"
#include "core/host_port.hpp"

namespace dsec {

/// The links of one actor to its peers, by node id. `Handle` is the peers'
/// actor handle type (typed: every call is checked against it).
template <class Handle>
class peer_links {
 public:
  /// Runs with the connected handle, or with an empty one and the error.
  using ready_fn = std::function<void(const Handle&, const error&)>;

  /// Runs `f(handle, {})` once `node` (at `address`, "host:port") is
  /// connected, or `f({}, error)` if it cannot be. Inside `self`.
  template <class Self>
  void with(Self* self, const std::string& node, const std::string& address,
            std::chrono::milliseconds connect_timeout, ready_fn f) {
    auto& link = links_[node];
    if (link.handle)
      return f(link.handle, {});
    auto hp = parse_host_port(address, false);
    if (!hp) {
      links_.erase(node);
      return f({}, unavailable("node " + node + ": bad address " + address));
    }
    with(self, node, hp->first, hp->second, connect_timeout, std::move(f));
  }

  /// The same, with the peer's host and port.
  template <class Self>
  void with(Self* self, const std::string& node, const std::string& host, uint16_t port,
            std::chrono::milliseconds connect_timeout, ready_fn f) {
    auto& link = links_[node];
    if (link.handle)
      return f(link.handle, {});
    link.waiting.push_back(std::move(f));
    if (link.connecting)
      return;
    link.connecting = true;
    auto mm = self->home_system().middleman().actor_handle();
    self->request(mm, caf::duration{connect_timeout}, caf::connect_atom::value, host, port)
      .then(
        [this, self, node](const caf::node_id&, caf::strong_actor_ptr& ptr,
                           const std::set<std::string>&) {
          auto it = links_.find(node);
          if (it == links_.end())
            return;
          if (!ptr)
            return drop(node, unavailable("node " + node + " publishes no actor"));
          auto& link = it->second;
          link.connecting = false;
          link.handle = caf::actor_cast<Handle>(std::move(ptr));
          self->monitor(link.handle);
          auto waiting = std::move(link.waiting);
          link.waiting.clear();
          for (auto& w : waiting)
            w(link.handle, {});
        },
        [this, self, node](caf::error& err) {
          drop(node, unavailable("connect to node " + node + ": "
                                 + (err == caf::sec::request_timeout
                                      ? std::string{"timed out"}
                                      : self->home_system().render(err))));
        });
  }

  /// Sends `(xs...)` to `node` and hands its `T` answer (or the error) to
  /// `done`, inside `self`; fails at once if the link drops meanwhile.
  template <class T, class Self, class... Ts>
  void ask(Self* self, const std::string& node, const std::string& address,
           std::chrono::milliseconds connect_timeout, caf::duration timeout,
           std::function<void(expected<T>)> done, Ts... xs) {
    with(self, node, address, connect_timeout,
         [this, self, node, timeout, done, xs...](const Handle& peer, const error& err) mutable {
           if (!peer)
             return done(err);
           auto ticket = track(node, [done](const error& e) { done(e); });
           auto settle = [this, node, ticket] { return this->settle(node, ticket); };
           self->request(peer, timeout, std::move(xs)...)
             .then([done, settle](T& x) { if (settle()) done(std::move(x)); },
                   [done, settle](caf::error& e) { if (settle()) done(from_caf(e)); });
         });
  }

  /// Tracks a call in flight to `node`; `fail` runs if the link drops first.
  uint64_t track(const std::string& node, std::function<void(const error&)> fail) {
    auto ticket = ++next_ticket_;
    links_[node].inflight.emplace(ticket, std::move(fail));
    return ticket;
  }

  /// Settles a tracked call: true if it was still in flight (answer it), false
  /// if the link dropped and failed it already.
  bool settle(const std::string& node, uint64_t ticket) {
    auto it = links_.find(node);
    return it != links_.end() && it->second.inflight.erase(ticket) > 0;
  }

  /// Fails everything queued on or in flight to `node` and forgets its link.
  void drop(const std::string& node, const error& err) {
    auto it = links_.find(node);
    if (it == links_.end())
      return;
    auto link = std::move(it->second);
    links_.erase(it);
    for (auto& w : link.waiting)
      w(Handle{}, err);
    for (auto& [ticket, fail] : link.inflight)
      fail(err);
  }

  /// For the owner's down handler: drops the link whose peer went down, with
  /// `why` added to the error. False if `source` is not one of them.
  bool on_down(const caf::actor_addr& source, const std::string& why) {
    for (auto& [node, link] : links_)
      if (link.handle && link.handle.address() == source) {
        auto id = node; // copied: drop() erases the entry
        drop(id, unavailable("node " + id + " went away (" + why + ")"));
        return true;
      }
    return false;
  }

  /// The nodes with a link (connected or connecting).
  [[nodiscard]] std::vector<std::string> nodes() const {
    std::vector<std::string> out;
    for (auto& [node, link] : links_)
      out.push_back(node);
    return out;
  }

 private:
  struct link {
    Handle handle;
    bool connecting = false;
    std::vector<ready_fn> waiting;
    std::unordered_map<uint64_t, std::function<void(const error&)>> inflight;
  };
  std::unordered_map<std::string, link> links_;
  uint64_t next_ticket_ = 0;
};

} // namespace dsec
