// FnCall wire implementation: framing (see fncall_wire.hpp).
#include "backends/fncall/fncall_wire.hpp"

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace dsec::backends::fncall {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(std::string_view s) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  return v;
}

void put_field(std::string& out, std::string_view f) {
  put_u32(out, static_cast<uint32_t>(f.size()));
  out.append(f);
}

/// The fields of a frame body, or an empty optional-like flag on overrun.
bool split_fields(std::string_view body, std::vector<std::string_view>& out) {
  while (!body.empty()) {
    if (body.size() < 4)
      return false;
    uint32_t n = get_u32(body);
    if (body.size() - 4 < n)
      return false;
    out.push_back(body.substr(4, n));
    body.remove_prefix(4 + n);
  }
  return true;
}

} // namespace

std::string encode_request(const fncall_request& req) {
  std::string body;
  put_field(body, req.language);
  put_field(body, req.code);
  put_field(body, req.stdin_data);
  put_field(body, std::to_string(req.timeout_s));
  put_field(body, std::to_string(req.files.size()));
  for (auto& [path, content] : req.files) {
    put_field(body, path);
    put_field(body, content);
  }
  std::string out;
  out.reserve(body.size() + 4);
  put_u32(out, static_cast<uint32_t>(body.size()));
  out += body;
  return out;
}

size_t frame_size(std::string_view buf) {
  if (buf.size() < 4)
    return 0;
  size_t n = get_u32(buf) + size_t{4};
  return buf.size() >= n ? n : 0;
}

expected<answer> decode_answer(std::string_view frame) {
  std::vector<std::string_view> f;
  if (frame.size() < 4 || !split_fields(frame.substr(4), f) || f.size() != 8)
    return internal_error("fncall: malformed answer from the fork server");
  answer a;
  auto num = [](std::string_view s) { return std::strtod(std::string{s}.c_str(), nullptr); };
  a.result.exit_code = static_cast<int32_t>(num(f[0]));
  a.result.timed_out = f[1] == "1";
  a.result.truncated = f[2] == "1";
  a.result.duration_ms = num(f[3]);
  a.tainted = f[4] == "1";
  a.result.stdout_data = std::string{f[5]};
  a.result.stderr_data = std::string{f[6]};
  a.error = std::string{f[7]};
  return a;
}

bool is_ack_frame(std::string_view frame) {
  std::vector<std::string_view> f;
  return frame.size() >= 4 && split_fields(frame.substr(4), f) && f.size() == 1 && f[0] == "ack";
}

std::optional<bool> clean_frame_tainted(std::string_view frame) {
  std::vector<std::string_view> f;
  if (frame.size() < 4 || !split_fields(frame.substr(4), f) || f.size() != 2 || f[0] != "clean")
    return std::nullopt;
  return f[1] != "0";
}

bool is_ready_frame(std::string_view frame) {
  std::vector<std::string_view> f;
  return frame.size() >= 4 && split_fields(frame.substr(4), f) && f.size() == 1
         && f[0] == "ready";
}

} // namespace dsec::backends::fncall
