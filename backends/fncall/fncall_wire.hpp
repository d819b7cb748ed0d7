// The FnCall wire: the framing between the node and the fork server in a pool sandbox
// (backends/fncall/fork_server/wire.py holds the other end). Pure, no I/O, so it
// is table-tested on its own.
//
// Frames both ways: u32 little-endian length of the rest, then fields, each a
// u32 length + bytes (binary-safe: code, stdin and files may hold any byte).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::backends::fncall {

/// Bytes captured per stream by the fork server; `truncated` beyond.
inline constexpr size_t max_output = 1u << 20;

/// Where a call's files and cwd live inside the worker, fresh for each call.
inline constexpr std::string_view call_dir = "/tmp/call";

/// The request frame for the fork server (after dsec::validate(fncall_request)).
std::string encode_request(const fncall_request& req);

/// How much of `buf` one whole frame takes (length prefix included), or 0
/// while it is incomplete.
size_t frame_size(std::string_view buf);

/// What the fork server answers for one call.
struct answer {
  exec_result result;
  /// The call changed something the server cannot reset: replace the worker.
  bool tainted = false;
  /// Non-empty when the call could not run (the server's message).
  std::string error;
};

/// Parses one whole frame (frame_size() bytes) of the server's answer.
expected<answer> decode_answer(std::string_view frame);

/// True if `frame` is the server's "ack": it read the request and may run it.
bool is_ack_frame(std::string_view frame);

/// If `frame` is the server's "clean" frame (sent after each answer, once
/// the sandbox is reset), whether the reset failed (tainted); else nullopt.
std::optional<bool> clean_frame_tainted(std::string_view frame);

/// True if `frame` is the server's "ready" frame, sent once after it
/// accepted the node's connection.
bool is_ready_frame(std::string_view frame);

} // namespace dsec::backends::fncall
