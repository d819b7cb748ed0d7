// The gossip wire messages: what one node says to another in a datagram or a
// stream. Plain structs; their byte layout lives in codec. Message type numbers
// and fields are append only: a newer peer may add fields at the end of a body
// (older peers skip them) or add types (older peers skip the frame).
#pragma once

#include "gossip/member.hpp"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace dsec::gossip {

/// Frame type numbers on the wire. Append only, never renumber.
enum class msg_type : uint8_t {
  ping = 1,
  ping_req = 2,
  ack = 3,
  member_update = 4,
  load_update = 5,
  push_pull = 6,
};

/// "Are you alive?" The target checks `target` is its own id (a restarted
/// process on a reused address must not answer for its predecessor).
struct ping_msg {
  uint32_t seq = 0;
  std::string target;
};

/// "Please ping `target` at `target_address` for me and forward its ack."
struct ping_req_msg {
  uint32_t seq = 0;
  std::string target;
  std::string target_address;
};

/// The answer to a ping (or a forwarded indirect ping) with the same seq.
struct ack_msg {
  uint32_t seq = 0;
};

/// A statement about one member: alive, suspect, dead or left at an incarnation,
/// made by `from` (suspicion confirmations are counted per distinct `from`).
struct member_update_msg {
  member_state state = member_state::alive;
  uint64_t incarnation = 0;
  std::string id;
  std::string address;
  std::string from;
};

/// A node's load report; ordered by (incarnation, report.seq).
struct load_update_msg {
  std::string id;
  uint64_t incarnation = 0;
  load_report report;
};

/// One member's full record inside a push/pull.
struct member_snapshot {
  std::string id;
  std::string address;
  uint64_t incarnation = 0;
  member_state state = member_state::alive;
  uint64_t load_incarnation = 0;
  load_report load;
};

/// Full state exchange (anti-entropy): sent on join and periodically; the
/// receiver merges it and answers with its own state (`reply` set).
struct push_pull_msg {
  bool join = false;
  bool reply = false;
  /// Sender's id, so the reply can be matched and logged.
  std::string from;
  std::vector<member_snapshot> members;
};

/// Any one message.
using message = std::variant<ping_msg, ping_req_msg, ack_msg, member_update_msg,
                             load_update_msg, push_pull_msg>;

} // namespace dsec::gossip
