// Connections to other nodes' front doors, for an actor that calls them
// (placement, image fetch, the native client): connect on first use, check
// that the peer speaks this node's protocol, queue the calls that wait for the
// connection, track the calls in flight, and fail all of them at once when the
// peer goes down (its down message) or is dropped (it left the cluster), so no
// caller waits for a timeout on a dead node. The next call after a drop
// connects again.
//
// Connecting goes through a seam, the peer connector (actors/interfaces.hpp):
// an actor that answers (connect_atom, host, port) with the peer's node, actor
// and the interface it publishes. CAF's middleman actor is the real one (TCP,
// BASP); tests give an in-process one (test/actor/test_system.hpp), so a flow
// across nodes runs in one deterministic test process.
//
// The check: a peer's published interface must hold every call of `Handle`
// (CAF's own rule in middleman::remote_actor), else the connect fails with
// "protocol mismatch" naming the first call the peer lacks. A peer that speaks
// more (a newer build, rows are append-only) is fine.
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
#include "actors/interfaces.hpp"
#include "core/error.hpp"
#include "core/host_port.hpp"

namespace dsec {

/// Why a peer publishing `published` cannot serve a caller that expects
/// `expected` (both as caf::actor_system::message_types gives them); empty
/// if it can. An empty `expected` (an untyped handle) accepts any peer.
inline std::string protocol_mismatch(const std::set<std::string>& expected,
                                     const std::set<std::string>& published) {
  if (expected.empty())
    return {};
  if (published.empty())
    return "the peer publishes an untyped actor, this node expects "
           + std::to_string(expected.size()) + " calls";
  size_t missing = 0;
  const std::string* first = nullptr;
  for (auto& sig : expected)
    if (published.count(sig) == 0) {
      ++missing;
      if (!first)
        first = &sig;
    }
  if (missing == 0)
    return {};
  return "the peer publishes " + std::to_string(published.size()) + " calls and lacks "
         + std::to_string(missing) + " of this node's " + std::to_string(expected.size())
         + "; first missing: " + *first;
}

/// A wait as people read it ("120 s", "250 ms").
inline std::string wait_text(const caf::duration& d) {
  using caf::time_unit;
  switch (d.unit) {
    case time_unit::minutes: return std::to_string(d.count) + " min";
    case time_unit::seconds: return std::to_string(d.count) + " s";
    case time_unit::milliseconds:
      return d.count % 1000 == 0 ? std::to_string(d.count / 1000) + " s"
                                 : std::to_string(d.count) + " ms";
    case time_unit::microseconds: return std::to_string(d.count) + " us";
    case time_unit::nanoseconds: return std::to_string(d.count) + " ns";
    default: return "no bound";
  }
}

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
    auto conn = connector_ ? connector_
                           : peer_connector{self->home_system().middleman().actor_handle()};
    auto where = "connect to node " + node + " at " + host + ":" + std::to_string(port);
    self->request(conn, caf::duration{connect_timeout}, caf::connect_atom::value, host, port)
      .then(
        [this, self, node, where](caf::node_id&, caf::strong_actor_ptr& ptr,
                                  std::set<std::string>& ifs) {
          auto it = links_.find(node);
          if (it == links_.end())
            return;
          if (!ptr)
            return drop(node, unavailable(where + ": no actor published there"));
          auto why = protocol_mismatch(
            self->home_system().message_types(caf::detail::type_list<Handle>{}), ifs);
          if (!why.empty())
            return drop(node, unavailable(where + ": protocol mismatch: " + why));
          auto& link = it->second;
          link.connecting = false;
          link.handle = caf::actor_cast<Handle>(std::move(ptr));
          self->monitor(link.handle);
          auto waiting = std::move(link.waiting);
          link.waiting.clear();
          for (auto& w : waiting)
            w(link.handle, {});
        },
        [this, self, node, where](caf::error& err) {
          drop(node, unavailable(where + ": "
                                 + (err == caf::sec::request_timeout
                                      ? std::string{"timed out"}
                                      : self->home_system().render(err))));
        });
  }

  /// Connects through `c` from now on instead of CAF's middleman (tests: an
  /// in-process directory of peers). Links made before keep their handles.
  void use(peer_connector c) { connector_ = std::move(c); }

  /// Sends `(xs...)` to `node` and hands its `T` answer (or the error) to
  /// `done`, inside `self`; fails at once if the link drops meanwhile, and
  /// with "node X did not answer within T" (timeout) after `timeout`.
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
                   [done, settle, node, timeout](caf::error& e) {
                     if (!settle())
                       return;
                     // Named here, so the caller (whose own wait is longer,
                     // core/clock.hpp) learns which node was slow.
                     if (e == caf::sec::request_timeout)
                       return done(error{errc::timeout, "node " + node + " did not answer within "
                                                          + wait_text(timeout)});
                     done(from_caf(e));
                   });
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
  /// `why` added to the error. False if `source` is not one of them. A call
  /// already sent may have run there before the link went (a delete that
  /// stopped the sandbox, then the node was killed), so the error says so:
  /// the caller cannot take it as "nothing happened".
  bool on_down(const caf::actor_addr& source, const std::string& why) {
    for (auto& [node, link] : links_)
      if (link.handle && link.handle.address() == source) {
        auto id = node; // copied: drop() erases the entry
        drop(id, unavailable("node " + id + " went away (" + why
                             + "); retry (a call already sent may have taken effect there)"));
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
  /// Null: CAF's middleman.
  peer_connector connector_;
};

} // namespace dsec
