// Gossip actor implementation (see gossip_actor.hpp).
#include "actors/gossip_actor.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "core/clock.hpp"
#include "core/egress_sources.hpp"
#include "core/inspect.hpp"
#include "gossip/member_view.hpp"

namespace dsec {

/// A datagram from the receiver thread (interfaces.hpp, gossip_actor).
struct gossip_packet {
  gossip::udp_transport::datagram d;
};

namespace {

// Marks the egress sources digest in a load report's layer list (issue 29).
constexpr const char* egress_digest_prefix = "egress-sources:";

/// Protocol timers are 100 ms and up; 20 ms keeps their error small.
constexpr auto tick_interval = std::chrono::milliseconds(20);
/// Load reports once a second, or every N x 20 ms in clusters past 50: every
/// node hears every report, so the bytes grow with N^2 / interval (the
/// simulation saturated packets at N = 1000 with a fixed second).
std::chrono::milliseconds load_interval(const gossip::memberlist& ml) {
  return std::max(std::chrono::milliseconds(1000),
                  std::chrono::milliseconds(20 * static_cast<int64_t>(ml.live_count())));
}
/// Coalescing of load-only view updates to the placement actor.
constexpr auto view_push_interval = std::chrono::milliseconds(250);
/// How long a leaving node keeps gossiping so its `left` reaches everyone.
constexpr auto leave_linger = std::chrono::milliseconds(800);

gossip::time_ms now() {
  return std::chrono::duration_cast<gossip::time_ms>(
    std::chrono::steady_clock::now().time_since_epoch());
}

int64_t mem_available_mb() {
  std::ifstream in{"/proc/meminfo"};
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:")
      return kb / 1024;
  return 0;
}

double load_per_core() {
  std::ifstream in{"/proc/loadavg"};
  double l1 = 0;
  in >> l1;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? l1 / static_cast<double>(cores) : l1;
}

void push_view(gossip_actor_ptr self) {
  auto& st = self->state;
  st.view_dirty = false;
  st.view_pushed_at = std::chrono::steady_clock::now();
  self->send(st.placement, view_atom::value, gossip::to_member_infos(st.members->members()));
}

/// Load-only changes arrive from every member every second: the whole view is
/// copied to placement at most every 250 ms for them (membership changes go
/// at once, in after_input).
void push_view_if_due(gossip_actor_ptr self) {
  auto& st = self->state;
  if (st.view_dirty && std::chrono::steady_clock::now() - st.view_pushed_at >= view_push_interval)
    push_view(self);
}

/// Drains memberlist events; logs membership changes, pushes the view.
void after_input(gossip_actor_ptr self) {
  auto& st = self->state;
  auto events = st.members->take_events();
  bool membership = false;
  for (auto& e : events) {
    if (e.kind == gossip::event_kind::updated) // load updates: too frequent to log
      continue;
    membership = true;
    caf::aout(self) << "dsec node " << st.ctx->config.node_id << ": gossip: " << e.who.id
                    << " (" << e.who.address << ") " << gossip::to_string(e.kind) << std::endl;
  }
  st.view_dirty = st.view_dirty || !events.empty();
  if (membership)
    push_view(self);
  else
    push_view_if_due(self);
}

void publish_load(gossip_actor_ptr self) {
  auto& st = self->state;
  if (st.load_inflight)
    return;
  st.load_inflight = true;
  self->request(st.lifecycle, local_wait, status_atom::value)
    .then(
      [self](node_status& ns) {
        auto& st = self->state;
        st.load_inflight = false;
        gossip::load_report r;
        // What admission still gives new sandboxes (the reclaim actor's last
        // sample less headroom and creates since), so placement scores by the
        // figure the node decides by; MemAvailable until the first sample.
        r.free_memory_mb = static_cast<uint64_t>(ns.memory_free_mb >= 0 ? ns.memory_free_mb
                                                                         : mem_available_mb());
        r.cpu_load = load_per_core();
        r.sandboxes = static_cast<uint32_t>(ns.sandboxes);
        r.creating = static_cast<uint32_t>(ns.creating);
        r.accepting = !st.leaving;
        r.layers = ns.layers;
        // The egress sources digest rides first in the layer list (the
        // list is cut from its end), so the wire format stays as it was.
        r.layers.insert(r.layers.begin(),
                        egress_digest_prefix + net::installed_egress_sources().digest);
        st.members->set_local_load(std::move(r), now());
        after_input(self);
      },
      [self](caf::error&) { self->state.load_inflight = false; });
}

} // namespace

gossip_state::~gossip_state() {
  if (net)
    net->shutdown();
  if (receiver.joinable())
    receiver.join();
}

gossip_actor::behavior_type gossip_behavior(gossip_actor_ptr self, node_context_ptr ctx,
                                            lifecycle_actor lifecycle, placement_actor placement,
                                            std::shared_ptr<gossip::udp_transport> net,
                                            std::vector<std::string> seeds) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.lifecycle = std::move(lifecycle);
  st.placement = std::move(placement);
  st.net = std::move(net);
  gossip::config cfg;
  cfg.id = st.ctx->config.node_id;
  cfg.address = st.ctx->config.advertise;
  // Grows across restarts, so a restarted node's new life wins at once.
  cfg.incarnation = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  st.members = std::make_unique<gossip::memberlist>(cfg, *st.net, std::random_device{}(), now());
  if (auto joined = st.members->join(seeds, now()); !joined)
    caf::aout(self) << "dsec node " << cfg.id << ": gossip: " << joined.err().message << std::endl;
  // The receiver thread holds only a weak address: it must not keep the actor alive.
  st.receiver = std::thread([net = st.net, addr = self->address()] {
    while (auto d = net->receive()) {
      auto hdl = caf::actor_cast<gossip_actor>(addr);
      if (!hdl)
        return;
      caf::anon_send(hdl, packet_atom::value,
                     std::make_shared<gossip_packet>(gossip_packet{std::move(*d)}));
    }
  });
  self->send(self, caf::tick_atom::value);
  self->send(self, load_atom::value);
  push_view(self);
  return {
    [self](caf::tick_atom) {
      self->state.members->tick(now());
      after_input(self);
      self->delayed_send(self, tick_interval, caf::tick_atom::value);
    },
    [self](load_atom) {
      publish_load(self);
      self->delayed_send(self, load_interval(*self->state.members), load_atom::value);
    },
    [self](packet_atom, gossip_packet_ptr& m) {
      auto& d = m->d;
      auto& ml = *self->state.members;
      // Garbage is counted by the memberlist and dropped; the node stays up.
      if (d.stream)
        (void)ml.handle_stream(d.from, d.data, now());
      else
        (void)ml.handle_packet(d.from, d.data, now());
      after_input(self);
    },
    [self](nodes_atom) { return gossip::to_member_infos(self->state.members->members()); },
    [self](leave_atom) {
      auto& st = self->state;
      st.leaving = true;
      st.members->leave(now());
      after_input(self);
      auto rp = self->make_response_promise<bool>();
      st.leave_waiters.push_back(rp);
      self->delayed_send(self, leave_linger, leave_atom::value, true);
      return rp;
    },
    // INTERNAL: the leave had time to spread.
    [self](leave_atom, bool) {
      for (auto& rp : self->state.leave_waiters)
        rp.deliver(true);
      self->state.leave_waiters.clear();
    },
  };
}

} // namespace dsec
