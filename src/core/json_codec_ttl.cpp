// The TTL fields of a sandbox description (see json_codec_ttl.hpp).
#include "core/json_codec_ttl.hpp"

#include <chrono>

#include "core/ttl.hpp"

namespace dsec::json_codec {

void add_ttl_fields(nlohmann::json& j, const sandbox_info& s) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  auto left = ttl::remaining_ms(s, now);
  j["ttl_remaining_s"] = left < 0 ? nlohmann::json(nullptr) : nlohmann::json(left / 1000.0);
  j["paused_ttl_s"] = s.paused_ttl_s;
  j["paused_expires_at"] = s.paused_expires_at_ms ? nlohmann::json(s.paused_expires_at_ms / 1000.0)
                                                  : nlohmann::json(nullptr);
}

} // namespace dsec::json_codec
