// The tunables of one gossip node, each with the reason for its default and the
// way it fails when set wrong. Defaults target a LAN or loopback cluster: a join
// seen everywhere within ~1 s, a killed node dead everywhere within ~5 s (5
// nodes), and no healthy node declared dead under 5% packet loss or a 2 s stall.
#pragma once

#include "gossip/member.hpp"

#include <cstddef>
#include <string>

namespace dsec::gossip {

using namespace std::chrono_literals;

/// Configuration of one memberlist node.
struct config {
  /// This node's id; must be unique in the cluster.
  std::string id;
  /// This node's "host:port", as peers reach it.
  std::string address;
  /// Starting incarnation. A restarting node should pass a value that grows
  /// across restarts (e.g. unix seconds at boot): its new life then overrides
  /// the old one's state and load reports without waiting for a refutation.
  uint64_t incarnation = 0;

  /// One probe per interval. 200 ms (memberlist LAN: 1 s) so a dead node is
  /// first probed within ~N/probers intervals; smaller costs more packets per
  /// second per node, larger slows detection linearly.
  time_ms probe_interval = 200ms;
  /// Wait this long for a direct ack before asking peers for an indirect probe.
  /// Loopback RTT is microseconds; 100 ms absorbs a busy actor scheduler. Too
  /// small causes needless ping-reqs (and suspicion on a loaded node); it must
  /// stay below probe_interval or indirect probes get no time.
  time_ms probe_timeout = 100ms;
  /// Peers asked to ping the target when the direct ping fails. 3 (memberlist)
  /// makes a false suspicion at 5% loss ~6e-4 per probe; fewer raises false
  /// suspicions, more adds load with diminishing gain.
  size_t indirect_checks = 3;

  /// Minimum suspicion = suspicion_mult * max(1, log10(N)) * probe_interval.
  /// memberlist uses 4 with a 1 s probe; we probe 5x faster, so 14 keeps the
  /// minimum at 2.8 s for N < 10: longer than a 2 s stall plus one refutation
  /// round, shorter than the 5 s detection budget. Lower kills stalled but
  /// healthy nodes; higher slows detection of real failures one for one.
  double suspicion_mult = 14;
  /// Suspicion without confirmations lasts max = this * minimum. memberlist
  /// uses 6; 3 keeps a failure that few peers have probed yet (a node killed
  /// right after it joined, small clusters) under ~8 s. Lower lets one node
  /// with a bad link kill others faster; higher slows such detections.
  double suspicion_max_timeout_mult = 3;
  /// Independent confirmations (K) that shrink the timeout to its minimum.
  /// 3: a kill is confirmed by many probers at once, a lossy link rarely by
  /// three. 0 (or N - 2 < K) means the minimum applies at once.
  size_t suspicion_confirmations = 3;

  /// Broadcasts go out to `gossip_fanout` random peers every interval on top of
  /// piggybacking. 200 ms / 3 (memberlist LAN) spreads news to 5 nodes in ~2
  /// rounds and to 1000 in ~7; slower intervals delay joins and deaths.
  time_ms gossip_interval = 200ms;
  size_t gossip_fanout = 3;
  /// Keep gossiping to dead members this long, so a node declared dead by
  /// mistake hears it and refutes. Longer wastes packets on real corpses.
  time_ms gossip_to_dead = 10s;
  /// Each broadcast is sent retransmit_mult * ceil(log10(N + 1)) times.
  /// memberlist uses 4; on 5-6 real nodes that left one member unaware of a
  /// join until the next push/pull in ~1 of 15 joins (each send picks a random
  /// peer, so ~24 picks can still miss one of 5). 6 makes that ~0.03% per node
  /// for a few more packets per membership change (rare next to load reports).
  size_t retransmit_mult = 6;
  /// The same for load reports. 2: a node that misses one report hears the
  /// next (and every push/pull), so load needs no certainty; its traffic is
  /// rate * N * retransmits, which at N=1000 saturates packets with mult 4.
  size_t load_retransmit_mult = 2;
  /// Largest datagram we build. 1400 stays under a 1500-byte Ethernet MTU with
  /// IP/UDP headers; larger fragments, smaller carries fewer piggybacked updates.
  size_t max_packet_size = 1400;

  /// Full state exchange with one random peer, repairing whatever gossip lost
  /// (partitions, saturated queues). 20 s: every node syncs with a random peer
  /// 3x a minute; its cost is O(N) bytes per exchange, so shorter hurts at N=1000.
  time_ms push_pull_interval = 20s;
  /// While no peer is known, retry the seeds this often (nodes may boot in any
  /// order; there is no master to wait for).
  time_ms join_retry_interval = 1s;
  /// Dead and left members are forgotten after this long. 30 s outlives any
  /// stale gossip still in flight; shorter risks resurrecting the dead from old
  /// alive messages, longer keeps the view (and push/pull) larger.
  time_ms dead_reap_timeout = 30s;
  /// Layers listed per load report. A digest is ~71 bytes: 8 keep a report near
  /// 600 bytes so it still piggybacks with other updates in one packet; more
  /// crowds out membership news, fewer tells placement less about locality.
  size_t max_layers_in_report = 8;
  /// Emit `updated` events for load changes (placement may just read members()).
  bool load_events = true;
  /// Cap of the minimum suspicion timeout's node scale (log10 N). The scale
  /// is memberlist's allowance for a refutation to reach everyone; at 200 ms
  /// gossip with fanout 3 it reaches 1,000 nodes in ~7 rounds (1.4 s), so
  /// past 3 s the scale only delays real deaths: uncapped, 160 simulated
  /// nodes marked a killed node dead after 6.75 s (7.55 s at 5% loss); capped,
  /// see bench/README.md (scale unit). Never below suspicion_mult x
  /// probe_interval (2.8 s, the small-cluster minimum that outlasts a 2 s
  /// stall). Lower kills slow-to-refute healthy nodes in large clusters under
  /// loss; higher slows detection in clusters past ~30 nodes.
  time_ms suspicion_min_cap = 3s;
};

} // namespace dsec::gossip
