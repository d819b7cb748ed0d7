// TTL over pauses (see ttl.hpp).
#include "core/ttl.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace dsec::ttl {

using nlohmann::json;

int64_t left_at(int64_t expires_at_ms, int64_t now_ms) {
  return expires_at_ms == 0 ? 0 : std::max<int64_t>(0, expires_at_ms - now_ms);
}

int64_t expires_after_resume(int64_t left_ms, int64_t now_ms) {
  return now_ms + std::max<int64_t>(0, left_ms);
}

int64_t paused_deadline(int64_t paused_at_ms, int64_t paused_ttl_s) {
  return paused_at_ms + paused_ttl_s * 1000;
}

int64_t remaining_ms(const sandbox_info& info, int64_t now_ms) {
  if (info.ttl_s <= 0)
    return -1;
  if (info.expires_at_ms != 0)
    return left_at(info.expires_at_ms, now_ms);
  if (info.state == sandbox_state::paused)
    return std::max<int64_t>(0, info.ttl_left_ms);
  return info.ttl_s * 1000; // creating: the clock has not started
}

std::string encode(const file_state& f) {
  return json{{"version", 1},
              {"paused_at_ms", f.paused_at_ms},
              {"left_ms", f.left_ms},
              {"expires_at_ms", f.expires_at_ms}}
    .dump();
}

expected<file_state> decode(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("ttl file: not a JSON object");
  file_state f;
  // Epoch milliseconds, well inside a double's 2^53.
  constexpr int64_t max_ms = int64_t{1} << 52;
  for (auto [key, out] : {std::pair{"paused_at_ms", &f.paused_at_ms},
                          std::pair{"left_ms", &f.left_ms},
                          std::pair{"expires_at_ms", &f.expires_at_ms}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer())
      return invalid_argument(std::string{"ttl file: "} + key + " is missing or not an integer");
    *out = it->get<int64_t>();
    if (*out < 0 || *out > max_ms)
      return invalid_argument(std::string{"ttl file: "} + key + " is out of range");
  }
  return f;
}

} // namespace dsec::ttl
