// The derived TTL field of a sandbox description (see json_codec_ttl.hpp).
#include "core/json_codec_ttl.hpp"

#include <chrono>

#include "core/ttl.hpp"

namespace dsec::json_codec {

void add_ttl_fields(nlohmann::json& j, const sandbox_info& s) {
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  auto left = ttl::remaining_ms(s, now);
  j["ttl_remaining_s"] = left < 0 ? nlohmann::json(nullptr) : nlohmann::json(left / 1000.0);
}

} // namespace dsec::json_codec
