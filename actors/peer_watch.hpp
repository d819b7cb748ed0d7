// A liveness check of the connection to a peer while calls to it wait
// (issue 28). Gossip cannot see every cut: with a one-way partition (B drops
// what A sends) both still look alive to gossip, whose indirect probes go
// around the cut, yet every call between them hangs until its deadline, and
// CAF's heartbeat notices only after its connection timeout (10 s). So the
// owner of the links (placement) watches its own calls: once a call to a
// peer has waited `after`, it asks the peer for its status over the same
// connection; no answer within `within` fails every call to that peer at
// once with a retryable `unavailable` naming it (peer_links::drop), and the
// next call connects again. A peer that answers (even with an error) is
// reachable: its slow calls keep waiting, checked again every `after`.
//
// Only while calls wait does a check run, so an idle actor arms no timer
// (an actor re-arming delayed_send forever would hang the system's exit).
//
// Header-only: a template over the owning actor, like peer_links.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/interfaces.hpp"
#include "actors/peer_links.hpp"
#include "core/error.hpp"

namespace dsec {

class peer_watch {
 public:
  /// 700 ms + 1 s: a call across a cut fails within ~1.7 s, under the 2 s
  /// the cluster promises. Shorter `within` fails calls to a peer whose
  /// scheduler stalls that long (they are retryable); longer breaks the 2 s.
  static constexpr std::chrono::milliseconds after{700};
  static constexpr std::chrono::milliseconds within{1000};

  /// A call to `node` starts; returns its ticket for end().
  uint64_t begin(const std::string& node) {
    auto t = ++next_;
    waiting_[node].insert(t);
    return t;
  }

  /// The call with `ticket` to `node` ended (answered or failed).
  void end(const std::string& node, uint64_t ticket) {
    auto it = waiting_.find(node);
    if (it == waiting_.end())
      return;
    it->second.erase(ticket);
    if (it->second.empty())
      waiting_.erase(it);
  }

  /// Arms a check of `node` in `after` unless one is armed. `Self` is the
  /// owner (it must react to (cont_atom, continuation)); `links` its peer
  /// links; `address` the peer's "host:port".
  template <class Handle, class Self>
  void watch(Self* self, peer_links<Handle>& links, const std::string& node,
             const std::string& address) {
    if (!armed_.insert(node).second)
      return;
    self->delayed_send(self, after, cont_atom::value,
                       continuation{[this, self, &links, node, address] {
                         armed_.erase(node);
                         auto it = waiting_.find(node);
                         if (it == waiting_.end())
                           return; // nothing waits any more
                         check(self, links, node, address, *it->second.begin());
                       }});
  }

 private:
  template <class Handle, class Self>
  void check(Self* self, peer_links<Handle>& links, const std::string& node,
             const std::string& address, uint64_t oldest) {
    auto answered = std::make_shared<bool>(false);
    links.with(self, node, address, std::chrono::milliseconds{within},
               [self, answered](const Handle& peer, const error&) {
                 if (!peer)
                   return; // the guard below fails the calls
                 self->request(peer, caf::duration{within}, status_atom::value)
                   .then([answered](node_status&) { *answered = true; },
                         [answered](caf::error& e) {
                           if (e != caf::sec::request_timeout)
                             *answered = true; // an answer, if an error
                         });
               });
    self->delayed_send(
      self, within, cont_atom::value,
      continuation{[this, self, &links, node, address, answered, oldest] {
        auto it = waiting_.find(node);
        if (it == waiting_.end() || !it->second.count(oldest))
          return; // the call that raised the check is over
        if (!*answered) {
          links.drop(node, unavailable("node " + node + " is unreachable: no answer over its "
                                       "connection within "
                                       + std::to_string(within.count())
                                       + " ms (cut off by a partition, or stalled); retry (a"
                                         " call already sent may still complete there)"));
          return;
        }
        watch(self, links, node, address); // slow, not cut: look again later
      }});
  }

  std::map<std::string, std::set<uint64_t>> waiting_;
  std::set<std::string> armed_;
  uint64_t next_ = 0;
};

} // namespace dsec
