// Terminals on the init channel (protocol.hpp): the bodies of `pty_open` and
// `pty_resize`, and the bounds of a terminal's size. A pty is an exec whose
// stdin, stdout and stderr are one pseudo-terminal inside the sandbox; init
// answers `pty_open` as it answers `exec` (started, output on stream 1,
// done), and `stdin_data` frames with its id are typed at the terminal.
// Header-only, like protocol.hpp, so both ends share it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "backends/channel/protocol.hpp"

namespace dsec::init_proto {

/// A terminal's size in character cells. Bounds: a window of at least one
/// cell; at most 1000 either way, far past any screen, so a client's bad
/// number is refused instead of handed to every full-screen program.
struct pty_size {
  uint16_t cols = 80;
  uint16_t rows = 24;
};
constexpr uint16_t max_pty_cells = 1000;

/// Why `s` is not a terminal size, or nullptr if it is.
inline const char* pty_size_error(int64_t cols, int64_t rows) {
  if (cols < 1 || cols > max_pty_cells)
    return "cols must be 1..1000";
  if (rows < 1 || rows > max_pty_cells)
    return "rows must be 1..1000";
  return nullptr;
}

/// `pty_open` for request `id`: the size, then an exec body. An empty argv
/// asks init for the user's login shell.
inline std::string encode_pty_open(uint32_t id, const pty_size& size, const exec_msg& m) {
  writer w(msg::pty_open, id);
  w.u32(uint32_t(size.cols) | (uint32_t(size.rows) << 16));
  w.strs(m.argv).strs(m.env).str(m.cwd).str(m.stdin_data).u64(m.timeout_ms).u8(1).str(m.user);
  return w.finish();
}

inline bool decode_pty_open(std::string_view body, pty_size& size, exec_msg& m) {
  reader r(body);
  auto cells = r.u32();
  size.cols = uint16_t(cells & 0xffff);
  size.rows = uint16_t(cells >> 16);
  m.argv = r.strs();
  m.env = r.strs();
  m.cwd = r.str();
  m.stdin_data = r.str();
  m.timeout_ms = r.u64();
  m.keep_stdin = r.u8();
  m.user = r.str();
  return r.done() && !pty_size_error(size.cols, size.rows);
}

inline std::string encode_pty_resize(uint32_t id, const pty_size& size) {
  return writer(msg::pty_resize, id).u32(uint32_t(size.cols) | (uint32_t(size.rows) << 16))
    .finish();
}

inline bool decode_pty_resize(std::string_view body, pty_size& size) {
  reader r(body);
  auto cells = r.u32();
  size.cols = uint16_t(cells & 0xffff);
  size.rows = uint16_t(cells >> 16);
  return r.done() && !pty_size_error(size.cols, size.rows);
}

} // namespace dsec::init_proto
